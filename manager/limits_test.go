package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// TestNestedWritableVolumes: a writable volume may not contain another
// mapping's host path, nor lie inside one; read-only ones may nest.
func TestNestedWritableVolumes(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a", "b"), 0o755)
	m, _, _ := newManager(t, manager.Options{VolumeRoots: []string{root}})
	vol := func(host, sandbox string, ro bool) mcpbox.Volume {
		return mcpbox.Volume{HostPath: filepath.Join(root, host), SandboxPath: sandbox, ReadOnly: ro}
	}
	for _, tc := range []struct {
		name string
		vols []mcpbox.Volume
		ok   bool
	}{
		{"writable around another", []mcpbox.Volume{vol("a", "/mnt/a", false), vol("a/b", "/mnt/b", true)}, false},
		{"inside a writable one", []mcpbox.Volume{vol("a/b", "/mnt/b", true), vol("a", "/mnt/a", false)}, false},
		{"the same directory twice, one writable", []mcpbox.Volume{vol("a", "/mnt/a", false), vol("a", "/mnt/c", true)}, false},
		{"read-only nesting", []mcpbox.Volume{vol("a", "/mnt/a", true), vol("a/b", "/mnt/b", true)}, true},
		{"side by side", []mcpbox.Volume{vol("a/b", "/mnt/b", false)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := m.Create(context.Background(), "alice", manager.CreateRequest{Volumes: tc.vols})
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && mcpbox.ErrorCode(err) != mcpbox.EINVALID {
				t.Fatalf("err = %v, want %s", err, mcpbox.EINVALID)
			}
			if s != nil {
				m.Stop(context.Background(), "alice", s.ID)
			}
		})
	}
}

// TestBadConfigVolume: a configured volume that fails its checks (here a
// symlink out of its root, left there after the config was written) is
// reported and left out; the manager starts and sessions work.
func TestBadConfigVolume(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(root, "link"))
	os.Mkdir(filepath.Join(root, "good"), 0o755)
	m, _, _ := newManager(t, manager.Options{VolumeRoots: []string{root}, Volumes: []mcpbox.Volume{
		{HostPath: filepath.Join(root, "link"), SandboxPath: "/mnt/bad"},
		{HostPath: filepath.Join(root, "good"), SandboxPath: "/mnt/good"},
	}})
	if got := m.DefaultVolumes(); len(got) != 1 || got[0].SandboxPath != "/mnt/good" || got[0].Root == "" {
		t.Errorf("default volumes %+v, want only the good one, with its root", got)
	}
	if _, err := m.Create(context.Background(), "alice", manager.CreateRequest{}); err != nil {
		t.Errorf("a session with one bad configured volume: %v", err)
	}
}

// TestAdmission: the live sandboxes' flavors (memory and disk, which is
// in memory too) may not add up past the host's memory × overcommit.
func TestAdmission(t *testing.T) {
	ctx := context.Background()
	// small is 1 GiB of memory and 1 GiB of disk: 2 GiB promised each.
	m, _, _ := newManager(t, manager.Options{HostCPUs: 2, HostMemoryBytes: 4 << 30, Overcommit: 1})
	for i := range 2 {
		if _, err := m.Create(ctx, "alice", manager.CreateRequest{}); err != nil {
			t.Fatalf("session %d of 2 that fit: %v", i+1, err)
		}
	}
	_, err := m.Create(ctx, "alice", manager.CreateRequest{})
	var e *mcpbox.Error
	if mcpbox.ErrorCode(err) != mcpbox.ELIMIT || !asError(err, &e) || e.Context["limit_mib"] != int64(4096) || len(e.Suggestions) == 0 {
		t.Fatalf("a third small sandbox on a 4 GiB host at overcommit 1: %#v, want %s with its numbers", err, mcpbox.ELIMIT)
	}
}

// TestCommandOutputBounded: what a command prints past max_output_bytes is
// counted, not kept.
func TestCommandOutputBounded(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, manager.Options{MaxOutputBytes: 64 << 10})
	s, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	streamed := 0
	res, err := m.RunCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "head -c 3000000 /dev/zero | tr '\\0' x; head -c 200000 /dev/zero >&2"},
		func(_ bool, b []byte) { streamed += len(b) })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 64<<10 || res.StdoutDropped != 3000000-64<<10 || len(res.Stderr) != 64<<10 || res.StderrDropped != 200000-64<<10 {
		t.Errorf("kept %d+%d bytes, dropped %d+%d; want 64 KiB each kept and the rest counted",
			len(res.Stdout), len(res.Stderr), res.StdoutDropped, res.StderrDropped)
	}
	if streamed != 3200000 {
		t.Errorf("%d bytes streamed as they came, want all 3200000", streamed)
	}
}

// TestBackgroundCommands: at most MaxBackgroundCommands run at once in a
// session, and a stopped session's commands are SESSION_NOT_FOUND, not
// answered from memory.
func TestBackgroundCommands(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, manager.Options{MaxBackgroundCommands: 2})
	s, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var handles []string
	for range 2 {
		h, err := m.StartCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "echo started; sleep 30"})
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	if _, err := m.StartCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "sleep 30"}); mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
		t.Fatalf("a third background command with a cap of 2: %v, want %s", err, mcpbox.ELIMIT)
	}
	if err := m.StopCommand(ctx, "alice", s.ID, handles[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stopped command to end", func() bool {
		out, err := m.CommandOutput(ctx, "alice", s.ID, handles[0])
		return err == nil && out.Done
	})
	if _, err := m.StartCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "true"}); err != nil {
		t.Errorf("a background command after one was stopped: %v", err)
	}
	if _, err := m.CommandOutput(ctx, "bob", s.ID, handles[1]); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("another owner reads a background command: %v", err)
	}
	if err := m.Stop(ctx, "alice", s.ID); err != nil {
		t.Fatal(err)
	}
	_, err = m.CommandOutput(ctx, "alice", s.ID, handles[1])
	if mcpbox.ErrorCode(err) != mcpbox.ESESSION || !strings.Contains(err.Error(), s.ID) {
		t.Errorf("output of a stopped session's command: %v, want %s", err, mcpbox.ESESSION)
	}
}
