package local_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// alive reports whether pid runs (a zombie has ended).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !bytes.Contains(st, []byte(") Z ")) && !bytes.Contains(st, []byte(") X "))
}

// TestEphemeralOutlivesCreatingThread creates an ephemeral sandbox from a
// goroutine whose OS thread then ends. Pdeathsig follows the thread that
// forked PID 1, not the process: the sandbox must live on as long as
// this process does.
func TestEphemeralOutlivesCreatingThread(t *testing.T) {
	rt := newRuntime(t)
	id := testutil.ID()
	type created struct {
		tid int
		err error
	}
	// Go never ends the process's main thread, even when the goroutine
	// locked to it exits. A creator that lands there holds it until the
	// test ends, and another creator (on another thread) takes over.
	release := make(chan struct{})
	defer close(release)
	var res created
	for {
		done := make(chan created, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			if unix.Gettid() == unix.Getpid() {
				done <- created{tid: -1}
				<-release
				runtime.UnlockOSThread()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: tiny, Ephemeral: true})
			done <- created{unix.Gettid(), err}
		}()
		if res = <-done; res.tid != -1 {
			break
		}
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	sb := &mcpbox.Sandbox{ID: id}
	pid := rt.PID(id)
	agentPIDs.Store(id, pid)
	t.Cleanup(func() {
		if err := rt.Destroy(context.Background(), id); err != nil {
			t.Errorf("destroy: %v", err)
		}
		assertGone(t, rt, sb)
	})
	waitUntil(t, 10*time.Second, "the creating thread to end", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", res.tid))
		return os.IsNotExist(err)
	})
	c := agentclient.ForSandbox(rt, id)
	defer c.Close()
	if out, code := mustSh(t, c, "echo alive"); code != 0 || out != "alive\n" || !alive(pid) {
		t.Fatalf("the sandbox died with the thread that created it: exit %d, %q", code, out)
	}
}

// TestDeadlineEndsSandbox: a sandbox told its deadline ends itself when
// it passes, with no manager around to destroy it.
func TestDeadlineEndsSandbox(t *testing.T) {
	rt := newRuntime(t)
	sb, c := newTinySandbox(t, rt)
	pid := rt.PID(sb.ID)
	// Something running must not keep it alive.
	marker := "deadline" + testutil.ID()
	go c.Run(context.Background(), agentclient.Command{Cmd: "bash", Args: []string{"-c", "exec -a " + marker + " sleep 300"}}, nil, nil)
	if !hostProcessWith(marker) {
		t.Fatal("sleeper did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.SetDeadline(ctx, time.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 60*time.Second, "the sandbox to end at its deadline", func() bool { return !alive(pid) })
	if hostProcessWith(marker) {
		t.Errorf("the sandbox ended but left %s running", marker)
	}
	list, err := rt.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Alive {
		t.Errorf("List = %v, %v; want the one sandbox, not alive", list, err)
	}
}
