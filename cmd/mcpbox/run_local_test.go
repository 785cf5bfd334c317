package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// TestRunDiesWithItsSandbox kills `mcpbox run` with SIGKILL, which gives
// it no chance to clean up: its sandbox (ephemeral) must die with it.
// It needs a real process to kill, so it builds the binary.
func TestRunDiesWithItsSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "mcpbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The killed run's agent is orphaned: be its reaper, since this
	// host's init may never reap it, and a zombie counts as a leak.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	home := testutil.Home(t)
	marker := "runkill" + testutil.ID()
	var out bytes.Buffer
	run := exec.Command(bin, "run", "--timeout", "10m", "-l", "shell", "exec bash -c 'exec -a "+marker+" sleep 300'")
	run.Env = []string{"MCPBOX_HOME=" + home, "HOME=" + home, "PATH=" + local.DefaultPath}
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	defer run.Process.Kill() // if the test fails early

	// The sandbox is up once its user process runs.
	var sleeper int
	deadline := time.Now().Add(time.Minute)
	for sleeper == 0 {
		select {
		case err := <-exited:
			t.Fatalf("mcpbox run ended before its sandbox ran: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sandbox ran the command within a minute:\n%s", out.String())
		}
		sleeper = processWith(marker)
		time.Sleep(20 * time.Millisecond)
	}
	rt, err := local.New(&local.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	list, err := rt.List(context.Background())
	if err != nil || len(list) != 1 || !list[0].Alive {
		t.Fatalf("List = %v, %v; want the run's one live sandbox", list, err)
	}
	id := list[0].ID
	testutil.Track(id)
	agent := rt.PID(id)
	t.Cleanup(func() { rt.Destroy(context.Background(), id) }) // after a failure too

	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	deadline = time.Now().Add(10 * time.Second) // a hang detector: it takes milliseconds
	for running(agent) || running(sleeper) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after mcpbox run was killed, its sandbox still runs (agent %d: %v, user process %d: %v)",
				agent, running(agent), sleeper, running(sleeper))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ws unix.WaitStatus
	unix.Wait4(agent, &ws, 0, nil) // ECHILD if someone else reaped it

	// What is left is files and cgroups, for the next start's recovery;
	// here Destroy removes them, and nothing else may remain.
	if err := rt.Destroy(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	for _, leak := range testutil.CheckLeaks() {
		if strings.Contains(leak, id) {
			t.Error(leak)
		}
	}
}

// processWith returns the pid of a live process whose command line
// contains marker, or 0.
func processWith(marker string) int {
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil || !bytes.Contains(b, []byte(marker)) || bytes.Contains(b, []byte("mcpbox\x00run")) {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(filepath.Dir(m)), "%d", &pid)
		if running(pid) {
			return pid
		}
	}
	return 0
}

// running reports whether pid is alive and not a zombie.
func running(pid int) bool {
	if pid <= 0 {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(st, ')')
	return i > 0 && i+2 < len(st) && st[i+2] != 'Z' && st[i+2] != 'X'
}
