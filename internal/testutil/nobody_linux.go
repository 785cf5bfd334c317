package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// nobody is the unprivileged user tests run rootless halves as.
const nobody = 65534

// AsNobody runs test, a test of this test binary, again as the
// unprivileged user nobody, and fails t unless that run passes. The run
// starts from a copy of the binary (the original sits in a directory only
// root may enter), in a fresh home nobody owns, given as MCPBOX_HOME,
// HOME and TMPDIR, with env beside it: the test tells its inner run apart
// by a variable there. It needs root, and skips without.
func AsNobody(t *testing.T, test string, env ...string) {
	t.Helper()
	RequireRoot(t)
	dir, err := os.MkdirTemp("", "mcpbox-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append([]string{"MCPBOX_HOME=" + home, "HOME=" + home, "TMPDIR=" + home}, env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+test)) {
		t.Fatalf("%s as nobody: %v\n%s", test, err, out)
	}
}
