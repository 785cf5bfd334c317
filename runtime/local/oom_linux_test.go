package local_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// diskHeavy has more disk than memory: its tmpfs, which is memory too,
// could take all of a memory limit that did not count it.
var diskHeavy = mcpbox.Flavor{Name: "diskheavy", CPUs: 1, MemoryBytes: 128 << 20, DiskBytes: 256 << 20, Pids: 64}

// TestOOMScores checks who the OOM killer takes first: user code (and
// kernels) before the agent, and user code cannot lower itself below the
// agent, which would leave the OOM killer nothing to take.
func TestOOMScores(t *testing.T) {
	rt := newRuntime(t)
	sb, c := newTinySandbox(t, rt)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", rt.PID(sb.ID)))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Lowering a score takes CAP_SYS_RESOURCE, which root in a
	// container may lack; the agent's children are raised either way.
	if hasCapSysResource(t) && agent != -999 {
		t.Errorf("agent's oom_score_adj = %d, want -999", agent)
	}
	// The agent raises a process's score right after starting it and
	// before it reports the start; stdin is fed only after that report,
	// so the cat that sh forks once it reads a line forks after the raise.
	// (A process that forks before the raise keeps the agent's score for
	// that child; reaper.SetOOMScoreAdj says why that is accepted.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var score strings.Builder
	if _, err := c.Run(ctx, agentclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "read go; cat /proc/self/oom_score_adj"}, Stdin: strings.NewReader("go\n")}, &score, &score); err != nil {
		t.Fatal(err)
	}
	if out := score.String(); out != "1000\n" || agent >= 1000 {
		t.Errorf("a user process's oom_score_adj = %q, the agent's %d; want 1000, above the agent's", out, agent)
	}
	line := fmt.Sprintf("echo %d >/proc/self/oom_score_adj", agent-1)
	if out, code := mustSh(t, c, line); code == 0 {
		t.Errorf("user code went below the agent (%d): %q succeeded: %q", agent, line, out)
	}
	var got strings.Builder
	err = c.Execute(ctx, agentclient.ExecuteRequest{Code: "open('/proc/self/oom_score_adj').read().strip()"}, func(ev mcpbox.CodeEvent) {
		got.WriteString(ev.Type + ":" + ev.Text + string(ev.Value) + " ")
	})
	if err != nil || !strings.Contains(got.String(), "'1000'") {
		t.Errorf("the Python kernel's oom_score_adj: %v: %s", err, got.String())
	}
}

// TestDiskFullIsENOSPC fills a disk larger than the sandbox's memory:
// the write must fail with ENOSPC, not start the OOM killer, and the
// sandbox must go on working.
func TestDiskFullIsENOSPC(t *testing.T) {
	rt := newRuntime(t)
	_, c := newSandbox(t, rt, diskHeavy)
	out, res, err := sh(t, c, 2*time.Minute, "dd if=/dev/zero of=/workspace/f bs=1M")
	if err != nil {
		t.Fatalf("dd: %v (output %q)", err, out)
	}
	if !res.Exited || res.ExitCode == 0 || !strings.Contains(out, "No space left on device") {
		t.Errorf("filling the disk: %+v, %q; want dd to fail with ENOSPC", res, out)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("agent gone after the disk filled: %v", err)
	}
	if out, code := mustSh(t, c, "rm /workspace/f && echo still here"); code != 0 || out != "still here\n" {
		t.Errorf("next command: exit %d, %q", code, out)
	}
}

// hasCapSysResource reports whether this process may lower oom_score_adj.
func hasCapSysResource(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
