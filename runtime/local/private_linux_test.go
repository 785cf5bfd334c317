package local_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// TestStatePrivate checks that everything under $MCPBOX_HOME is private
// to its owner once a sandbox runs from it, in a home an older version
// left open (0711, as the sandbox's PID 1 once had to walk through it),
// and that another host user can neither list, read, stat nor connect to
// anything there.
func TestStatePrivate(t *testing.T) {
	testutil.RequireRoot(t)
	home := testutil.Home(t)
	old := filepath.Join(home, "sessions", "olderversion")
	if err := os.MkdirAll(old, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{home, filepath.Dir(old), old} {
		os.Chmod(d, 0o711)
	}
	rt, err := local.New(&local.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	sb, c := newTinySandbox(t, rt)
	// The sandbox still reaches what it is handed: its own root, and the
	// kernel drivers.
	if out, code := mustSh(t, c, "ls /opt/mcpbox"); code != 0 || !strings.Contains(out, "mcpbox_kernel.py") {
		t.Errorf("kernel drivers not in the sandbox: exit %d, %q", code, out)
	}

	kernels := filepath.Join(home, "kernels")
	err = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == kernels {
			// Public code that every sandbox's user reads (see the
			// package doc); the home keeps others out of it.
			return fs.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(home, "sessions", sb.ID)
	for _, argv := range [][]string{
		{"ls", home},
		{"ls", filepath.Join(home, "sessions")},
		{"stat", dir},
		{"cat", filepath.Join(dir, "sandbox.json")},
		{"cat", filepath.Join(dir, "agent.log")},
		{"cat", filepath.Join(kernels, "mcpbox_kernel.py")},
		{python3(t), "-c", "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])", filepath.Join(dir, "agent.sock")},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(strings.ToLower(string(out)), "permission denied") {
			t.Errorf("as nobody, %q: %v, %s; want permission denied", argv, err, out)
		}
	}
}

// python3 is the host's python3 as the sandbox finds it, which any user
// may run (not a shim in root's home).
func python3(t *testing.T) string {
	t.Helper()
	for _, d := range filepath.SplitList(local.DefaultPath) {
		if p := filepath.Join(d, "python3"); syscall.Access(p, 1) == nil {
			return p
		}
	}
	t.Skip("skipped: no python3 on " + local.DefaultPath)
	return ""
}
