package kernel

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	if old, err := os.ReadFile(src); err != nil || !bytes.Equal(old, []byte(pythonDriver)) {
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
