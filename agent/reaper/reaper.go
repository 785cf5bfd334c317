// Package reaper starts the agent's child processes and is the only thing
// in the agent that waits for them.
//
// The agent is PID 1 of its pid namespace, so orphans are reparented to it
// and must be reaped, and reaping with wait4(-1) would steal the status of
// a child that exec.Cmd.Wait is waiting for. So the agent starts every
// child through Start and never calls exec.Cmd.Wait or os.Process.Wait:
// one goroutine reaps everything on SIGCHLD and hands each registered
// child its status; orphans' statuses are discarded. Outside a pid
// namespace (tests, Kubernetes) the same code reaps only our own children.
package reaper

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Child is a process started by Start.
type Child struct {
	// Pid is the child's process id; it stays valid after the reaper
	// released Process.
	Pid int
	// Process is the started process; use it to signal, never to Wait.
	Process *os.Process
	done    chan struct{}
	status  syscall.WaitStatus
}

// Done is closed once the child has been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait blocks until the child has been reaped and returns how it ended.
func (c *Child) Wait() syscall.WaitStatus {
	<-c.done
	return c.status
}

var (
	startOnce sync.Once
	// mu is held across fork and registration, and by the reaper while it
	// dispatches, so a child reaped the instant it starts still finds its
	// registration.
	mu       sync.Mutex
	children = map[int]*Child{}
)

// Start starts a process like os.StartProcess and registers it with the
// reaper.
func Start(name string, argv []string, attr *os.ProcAttr) (*Child, error) {
	startOnce.Do(func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGCHLD)
		go reap(sig)
	})
	mu.Lock()
	defer mu.Unlock()
	p, err := os.StartProcess(name, argv, attr)
	if err != nil {
		return nil, err
	}
	c := &Child{Pid: p.Pid, Process: p, done: make(chan struct{})}
	children[p.Pid] = c
	return c, nil
}

// reap collects every exited child each time SIGCHLD arrives. Signals
// coalesce, so each wake-up drains all that are ready.
func reap(sig <-chan os.Signal) {
	for range sig {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			mu.Lock()
			c := children[pid]
			delete(children, pid)
			mu.Unlock()
			if c != nil {
				c.status = ws
				c.Process.Release()
				close(c.done)
			}
		}
	}
}
