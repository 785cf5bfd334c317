//go:build linux

package cgroup

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests here check that the kernel enforces what New set up, and that
// Kill empties a group however the host lets it.

// TestPidsLimit lets a shell in a group limited to 32 tasks try to start
// 100 sleeps, and counts what it got.
func TestPidsLimit(t *testing.T) {
	const limit = 32
	g := newGroup(t, Limits{Pids: limit})
	script := `read go; n=0
while [ $n -lt 100 ]; do sleep 30 </dev/null >/dev/null 2>&1 & echo started; n=$((n+1)); done`
	cmd := exec.Command("/bin/sh", "-c", script)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	out, _ := io.ReadAll(stdout)
	cmd.Wait() // dash gives up at the first failed fork; others would go on

	started := strings.Count(string(out), "started")
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	events, err := readKey(filepath.Join(dirOf(t, g, "pids").path, "pids.events"), "max")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started %d sleeps; %d processes in the group; %d forks refused", started, len(pids), events)
	if started == 0 || started >= limit {
		t.Errorf("the shell started %d sleeps, want 1..%d (the shell itself is one task)", started, limit-1)
	}
	if len(pids) > limit {
		t.Errorf("%d processes in the group, limit %d", len(pids), limit)
	}
	if events < 1 {
		t.Errorf("pids.events max = %d: the kernel refused no fork", events)
	}
}

func dirOf(t *testing.T, g *Group, controller string) dir {
	t.Helper()
	d, ok := g.carrier(controller)
	if !ok {
		t.Skipf("skipped: no hierarchy on this host carries %s", controller)
	}
	return d
}

// TestMemoryLimit runs a process that touches 200 MiB in a 64 MiB group:
// the OOM killer must stop it.
func TestMemoryLimit(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=alloc")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	out, _ := io.ReadAll(stdout)
	err := cmd.Wait()

	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("allocating 200 MiB in a 64 MiB group: %v (output %q), want killed by SIGKILL", err, out)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills == -1 {
		t.Log("this kernel does not count OOM kills")
	} else if st.OOMKills < 1 {
		t.Errorf("Stats().OOMKills = %d after an OOM kill", st.OOMKills)
	}
}

// TestKill kills a shell that forks without pause, and the sleeps it
// started, through each way Kill has: every hierarchy (cgroup.kill where
// the kernel has it), v1 with the freezer, and v1 without it.
func TestKill(t *testing.T) {
	tests := []struct {
		name string
		keep func(d dir) bool
	}{
		{"every hierarchy", func(d dir) bool { return true }},
		{"v2 only", func(d dir) bool { return d.v2 }},
		{"v1 only", func(d dir) bool { return !d.v2 }},
		{"v1 without freezer", func(d dir) bool { return !d.v2 && !d.has("freezer") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, Limits{Pids: 64})
			view := &Group{name: g.name}
			for _, d := range g.dirs {
				if tt.keep(d) {
					view.dirs = append(view.dirs, d)
				}
			}
			if len(view.dirs) == 0 {
				t.Skip("skipped: this host has no such hierarchy")
			}
			script := `read go; for i in 1 2 3 4 5; do sleep 30 </dev/null >/dev/null 2>&1 & done
while :; do /bin/true; done`
			cmd, stdin := start(t, g, "/bin/sh", "-c", script)
			io.WriteString(stdin, "go\n")
			waitFor(t, func() bool { p, _ := g.Pids(); return len(p) >= 6 })

			if err := view.Kill(); err != nil {
				t.Fatal(err)
			}
			if pids, err := g.Pids(); err != nil || len(pids) != 0 {
				t.Errorf("after Kill, Pids() = %v, %v; want none", pids, err)
			}
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("the shell ended with %v, want killed", err)
			}
		})
	}
}

// waitFor polls cond for up to 5 seconds: for a state another process
// reaches, not for timing.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
