package reaper_test

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/mcpbox/mcpbox/agent/reaper"
)

func start(t *testing.T, argv ...string) *reaper.Child {
	t.Helper()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	c, err := reaper.Start(argv[0], argv, &os.ProcAttr{Files: []*os.File{devnull, devnull, devnull}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExitStatuses(t *testing.T) {
	tests := []struct {
		name   string
		argv   []string
		code   int
		signal syscall.Signal
	}{
		{"true", []string{"/bin/true"}, 0, 0},
		{"exit 7", []string{"/bin/sh", "-c", "exit 7"}, 7, 0},
		{"killed", []string{"/bin/sh", "-c", "kill -9 $$"}, -1, syscall.SIGKILL},
		{"orphan left behind", []string{"/bin/sh", "-c", "sleep 0.1 & exit 3"}, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := start(t, tt.argv...).Wait()
			if tt.signal != 0 {
				if !ws.Signaled() || ws.Signal() != tt.signal {
					t.Errorf("status %v, want killed by %v", ws, tt.signal)
				}
			} else if !ws.Exited() || ws.ExitStatus() != tt.code {
				t.Errorf("status %v, want exit %d", ws, tt.code)
			}
		})
	}
}

func TestManyConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			argv := []string{"/bin/true"}
			want := 0
			if i%5 == 0 {
				argv, want = []string{"/bin/false"}, 1
			}
			if ws := start(t, argv...).Wait(); ws.ExitStatus() != want {
				t.Errorf("child %d: %v, want exit %d", i, ws, want)
			}
		}()
	}
	wg.Wait()
}

// TestLeavesOthersChildren: outside PID 1 the reaper reaps only what it
// started, so a process that also runs other children (a test binary, a
// server) can still wait for them.
func TestLeavesOthersChildren(t *testing.T) {
	if os.Getpid() == 1 {
		t.Skip("skipped: as PID 1 the reaper reaps every child, by design")
	}
	mine, err := reaper.Start("/bin/sh", []string{"sh", "-c", "exit 3"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		// SIGCHLD from these wakes the reaper while they are ours to wait.
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatalf("another child's Wait: %v (the reaper took its status)", err)
		}
	}
	if ws := mine.Wait(); ws.ExitStatus() != 3 {
		t.Errorf("the reaper's own child ended with %d, want 3", ws.ExitStatus())
	}
}
