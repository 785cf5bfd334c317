package kernel_test

import (
	"bytes"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/agent/kernel"
	"github.com/mcpbox/mcpbox/agent/process"
)

// TestPythonModule checks that kernels start from the precompiled driver
// when ModuleDir has it, and that user code cannot tell: same sys.path.
func TestPythonModule(t *testing.T) {
	py, err := process.LookPath("python3", path)
	if err != nil {
		t.Fatalf("python3 is needed: %v", err)
	}
	want, err := exec.Command(py, "-c", "import sys; print(sys.implementation.cache_tag)").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tag, err := kernel.WritePythonModule(dir, py)
	if err != nil || tag != strings.TrimSpace(string(want)) {
		t.Fatalf("first write: tag %q, %v; want %q", tag, err, want)
	}
	pycs, _ := filepath.Glob(filepath.Join(dir, "__pycache__", kernel.PythonModule+".*.pyc"))
	if len(pycs) != 1 {
		t.Fatalf("compiled driver: %v, want one .pyc", pycs)
	}
	src := filepath.Join(dir, kernel.PythonModule+".py")
	before, _ := os.Stat(src)
	pycBefore, _ := os.Stat(pycs[0])
	time.Sleep(10 * time.Millisecond)
	if tag2, err := kernel.WritePythonModule(dir, py); err != nil || tag2 != tag {
		t.Fatalf("second write: tag %q, %v; want %q", tag2, err, tag)
	}
	if after, _ := os.Stat(src); !after.ModTime().Equal(before.ModTime()) {
		t.Error("an unchanged driver was written again (its bytecode goes stale)")
	}
	// Nor compiled again: the second start runs no interpreter.
	if after, _ := os.Stat(pycs[0]); !after.ModTime().Equal(pycBefore.ModTime()) {
		t.Error("fresh bytecode was compiled again")
	}

	for _, tc := range []struct {
		dir        string
		fromModule string
	}{{dir, "True"}, {"", "False"}, {t.TempDir(), "False"}} {
		m := kernel.New(&kernel.Options{
			UID: os.Getuid(), GID: os.Getgid(), Home: t.TempDir(), ModuleDir: tc.dir,
			Env: map[string]string{"PATH": path, "HOME": t.TempDir(), "LANG": "C.UTF-8"},
		})
		srv := httptest.NewServer(m.Handler())
		evs := run(t, srv.URL, "import sys\n'"+kernel.PythonModule+"' in sys.modules")
		if got := find(evs, "result"); got == nil || got["text"] != tc.fromModule {
			t.Errorf("ModuleDir %q: driver loaded as a module: %v, want %s", tc.dir, got, tc.fromModule)
		}
		evs = run(t, srv.URL, "x = 6 * 7\nprint(x)\nsys.path[0]")
		if text(evs, "stdout") != "42\n" || find(evs, "result")["text"] != "''" {
			t.Errorf("ModuleDir %q: %v, want 42 printed and sys.path[0] == ''", tc.dir, evs)
		}
		srv.Close()
		m.Close()
	}
}

// TestPythonModuleSourceOnly: without an interpreter on the host the
// source is still written, for template interpreters to compile.
func TestPythonModuleSourceOnly(t *testing.T) {
	dir := t.TempDir()
	tag, err := kernel.WritePythonModule(dir, "")
	if err != nil || tag != "" {
		t.Fatalf("tag %q, %v", tag, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, kernel.PythonModule+".py"))
	if err != nil || !bytes.Equal(b, kernel.PythonSource()) {
		t.Fatalf("source: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "__pycache__")); err == nil {
		t.Error("bytecode without an interpreter")
	}
}
