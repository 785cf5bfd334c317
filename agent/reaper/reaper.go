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
//
// Every child is forked from one dedicated OS thread, the spawner. A
// forked child copies the credentials of the thread that forked it, and
// some of them (the capability bounding set, securebits) are per thread in
// Linux: OnSpawnerThread lets PID 1 shed them on the one thread that
// matters, which Go gives no other way to do.
package reaper

import (
	"os"
	"os/signal"
	"runtime"
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
	// spawner runs functions on the spawner thread.
	spawner = make(chan func())
)

func setup() {
	startOnce.Do(func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGCHLD)
		go reap(sig)
		go func() {
			// Never unlocked: the thread stays the spawner's alone.
			runtime.LockOSThread()
			for f := range spawner {
				f()
			}
		}()
	})
}

// OnSpawnerThread runs f on the thread every child is forked from.
func OnSpawnerThread(f func() error) error {
	setup()
	errc := make(chan error, 1)
	spawner <- func() { errc <- f() }
	return <-errc
}

// Start starts a process like os.StartProcess and registers it with the
// reaper.
func Start(name string, argv []string, attr *os.ProcAttr) (*Child, error) {
	setup()
	mu.Lock()
	defer mu.Unlock()
	var p *os.Process
	err := OnSpawnerThread(func() (err error) {
		p, err = os.StartProcess(name, argv, attr)
		return err
	})
	if err != nil {
		return nil, err
	}
	c := &Child{Pid: p.Pid, Process: p, done: make(chan struct{})}
	children[p.Pid] = c
	return c, nil
}

// reap collects exited children each time SIGCHLD arrives. Signals
// coalesce, so each wake-up drains all that are ready. As PID 1 it reaps
// every child, orphans included; otherwise (tests, a process in a
// container that is not its PID 1) only the children Start registered, so
// that other code in the process can still wait for its own.
func reap(sig <-chan os.Signal) {
	all := os.Getpid() == 1
	for range sig {
		if all {
			reapAny()
		} else {
			reapOwn()
		}
	}
}

func reapAny() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		dispatch(pid, ws)
	}
}

func reapOwn() {
	mu.Lock()
	pids := make([]int, 0, len(children))
	for pid := range children {
		pids = append(pids, pid)
	}
	mu.Unlock()
	for _, pid := range pids {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		for err == syscall.EINTR {
			got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		if got == pid {
			dispatch(pid, ws)
		}
	}
}

// dispatch hands a reaped child its status; an orphan's is discarded.
func dispatch(pid int, ws syscall.WaitStatus) {
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
