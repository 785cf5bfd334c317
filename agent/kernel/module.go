package kernel

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PythonModule is the name the Python driver has when it is imported from
// a module directory rather than passed as source.
const PythonModule = "mcpbox_kernel"

// WritePythonModule writes the Python driver into dir as an importable
// module and compiles its bytecode with python, so that kernels started
// with Options.ModuleDir pointing at dir (as the sandbox sees it) load it
// without compiling 200 lines of source at every start: about 2 ms of
// each kernel's boot. dir is shared by every sandbox; unchanged contents
// are left alone, so the bytecode stays valid across restarts.
func WritePythonModule(dir, python string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(dir, PythonModule+".py")
	old, err := os.ReadFile(src)
	if err == nil && bytes.Equal(old, []byte(pythonDriver)) && compiled(dir, src, python) {
		return nil // as an earlier start left it: no interpreter to run
	}
	if err != nil || !bytes.Equal(old, []byte(pythonDriver)) {
		// Rename over the old file: a kernel starting now reads one
		// version or the other, never half of each.
		tmp := src + ".tmp"
		if err := os.WriteFile(tmp, []byte(pythonDriver), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, src); err != nil {
			return err
		}
	}
	// py_compile writes the .pyc atomically, where the import system
	// looks for it.
	out, err := exec.Command(python, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)", src).CombinedOutput()
	if err != nil {
		return fmt.Errorf("compile the Python driver with %s: %v: %s", python, err, out)
	}
	return nil
}

// compiled reports whether src has bytecode for python in dir's
// __pycache__, at least as new as itself. python's version comes from its
// file name (python3 -> python3.11: cpython-311); when that says nothing,
// the answer is no and the caller compiles.
func compiled(dir, src, python string) bool {
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return false
	}
	ver, ok := strings.CutPrefix(filepath.Base(real), "python")
	major, minor, ok2 := strings.Cut(ver, ".")
	if !ok || !ok2 || major == "" || minor == "" {
		return false
	}
	st, err := os.Stat(src)
	if err != nil {
		return false
	}
	pt, err := os.Stat(filepath.Join(dir, "__pycache__", PythonModule+".cpython-"+major+minor+".pyc"))
	return err == nil && !pt.ModTime().Before(st.ModTime())
}

// pythonArgs is how a Python kernel starts: from the compiled module in
// dir when there is one, else from the driver's source.
func pythonArgs(dir string) []string {
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, PythonModule+".py")); err == nil {
			// The module's directory leaves sys.path once it is loaded:
			// user code sees the path a plain interpreter has.
			return []string{"-u", "-c", fmt.Sprintf("import sys; sys.path.insert(0, %q); import %s as k; del sys.path[0]; k._main()", dir, PythonModule)}
		}
	}
	return []string{"-u", "-c", pythonDriver}
}
