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

// PythonSource returns the Python driver's source: the bytes
// WritePythonModule writes as PythonModule+".py". The runtime hashes it
// and copies it beside bytecode made elsewhere (by a template's own
// interpreter).
func PythonSource() []byte { return []byte(pythonDriver) }

// WritePythonModule writes the Python driver into dir as an importable
// module and compiles its bytecode with python, so that kernels started
// with Options.ModuleDir pointing at dir (as the sandbox sees it) load it
// without compiling 200 lines of source at every start: about 2 ms of
// each kernel's boot. dir is shared by every sandbox; unchanged contents
// are left alone, so the bytecode stays valid across restarts.
//
// It returns python's cache tag (sys.implementation.cache_tag, as in
// "cpython-311"): the bytecode serves interpreters with that tag only.
// With python "" the source is written alone and the tag is "": kernels
// still import it, compiling it as they start.
func WritePythonModule(dir, python string) (tag string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	src := filepath.Join(dir, PythonModule+".py")
	old, err := os.ReadFile(src)
	same := err == nil && bytes.Equal(old, []byte(pythonDriver))
	if same && python != "" {
		if tag := compiledTag(dir, src, python); tag != "" {
			return tag, nil // as an earlier start left it: no interpreter to run
		}
	}
	if !same {
		// Rename over the old file: a kernel starting now reads one
		// version or the other, never half of each.
		tmp := src + ".tmp"
		if err := os.WriteFile(tmp, []byte(pythonDriver), 0o644); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, src); err != nil {
			return "", err
		}
	}
	if python == "" {
		return "", nil
	}
	// py_compile writes the .pyc atomically, where the import system
	// looks for it.
	out, err := exec.Command(python, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True); print(sys.implementation.cache_tag)", src).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			out = ee.Stderr
		}
		return "", fmt.Errorf("compile the Python driver with %s: %v: %s", python, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// compiledTag returns python's cache tag when src has bytecode for it in
// dir's __pycache__, at least as new as itself; else "". python's version
// comes from its file name (python3 -> python3.11: cpython-311); when
// that says nothing, the answer is "" and the caller compiles.
func compiledTag(dir, src, python string) string {
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return ""
	}
	ver, ok := strings.CutPrefix(filepath.Base(real), "python")
	major, minor, ok2 := strings.Cut(ver, ".")
	if !ok || !ok2 || major == "" || minor == "" {
		return ""
	}
	st, err := os.Stat(src)
	if err != nil {
		return ""
	}
	tag := "cpython-" + major + minor
	pt, err := os.Stat(filepath.Join(dir, "__pycache__", PythonModule+"."+tag+".pyc"))
	if err != nil || pt.ModTime().Before(st.ModTime()) {
		return ""
	}
	return tag
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
