package local

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Every sandbox's PID 1 is started from one OS thread that this process
// keeps for its whole life, for two reasons.
//
// Pdeathsig (an ephemeral sandbox dies with its creator) is sent when the
// thread that forked the child exits, not the process, and Go ends a
// thread whenever a goroutine that locked it returns without unlocking.
// This thread never ends.
//
// And the child must start in its scratch directory, which it could not
// walk to itself (see the package doc): the kernel moves a working
// directory into the child's new mount namespace with it. So this thread
// has a working directory of its own (unshare CLONE_FS) and changes it to
// the scratch directory for each start.

// spawnRequest is one start for the spawner thread.
type spawnRequest struct {
	cmd  *exec.Cmd
	dir  *os.File // the child's working directory
	done chan error
}

var (
	spawnOnce sync.Once
	spawns    chan spawnRequest
)

// spawnIn starts cmd from the spawner thread with dir as its working
// directory; cmd.Dir must be empty.
func spawnIn(dir *os.File, cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawns = make(chan spawnRequest)
		ready := make(chan error)
		go spawner(ready)
		if err := <-ready; err != nil {
			// Leave spawns unserved: every start fails the same way.
			spawns = nil
			spawnErr = err
		}
	})
	if spawns == nil {
		return spawnErr
	}
	req := spawnRequest{cmd: cmd, dir: dir, done: make(chan error, 1)}
	spawns <- req
	return <-req.done
}

var spawnErr error // why there is no spawner thread, set once

// spawner serves spawnIn on a thread it never gives back to the runtime.
func spawner(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: see spawnRequest
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		ready <- fmt.Errorf("spawner thread: unshare CLONE_FS: %w", err)
		return
	}
	close(ready)
	for req := range spawns {
		req.done <- startIn(req.dir, req.cmd)
	}
}

func startIn(dir *os.File, cmd *exec.Cmd) error {
	if err := unix.Fchdir(int(dir.Fd())); err != nil {
		return fmt.Errorf("chdir to the scratch directory: %w", err)
	}
	// Back to / afterwards, not to hold a directory Destroy removes.
	defer unix.Chdir("/")
	return cmd.Start()
}
