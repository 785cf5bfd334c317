package local

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agent/kernel"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// withFiles is img with one more layer holding files (path: body), each
// mode 0755 so that a script may stand in for a program.
func withFiles(t testing.TB, img v1.Image, files map[string]string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for name := range files {
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1700000000, 0)})
	}
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	out, err := mutate.AppendLayers(img, l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// logBuffer collects a runtime's logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pyRuntime is a runtime in a test home, logging to log, with img
// imported as template name.
func pyRuntime(t testing.TB, name string, img v1.Image, log *logBuffer) (*Runtime, *mcpbox.Template) {
	t.Helper()
	testutil.RequireRoot(t)
	r, err := New(&Options{Home: testutil.Home(t), Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.py.wg.Wait) // no build outlives its test
	return r, importTemplate(t, r, name, img)
}

// importTemplate imports img into r's template store as name.
func importTemplate(t testing.TB, r *Runtime, name string, img v1.Image) *mcpbox.Template {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	s, err := r.Templates()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := s.Import(context.Background(), name, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tm.Has(mcpbox.Python) {
		t.Fatalf("template %s has no Python: %v", name, tm.Languages)
	}
	return tm
}

// pySandbox creates a sandbox of template tmpl (prestarting Python) and a
// client of its agent.
func pySandbox(t testing.TB, r *Runtime, tmpl string) *agentclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := testutil.ID()
	if _, err := r.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: mcpbox.Flavors["small"], Template: tmpl,
		Prestart: []mcpbox.Language{mcpbox.Python}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Destroy(context.Background(), id) })
	c := agentclient.ForSandbox(r, id)
	t.Cleanup(c.Close)
	return c
}

func pyRun(t testing.TB, c *agentclient.Client, argv ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	res, err := c.Run(ctx, agentclient.Command{Cmd: argv[0], Args: argv[1:]}, &out, &errOut)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %v %+v: %s %s", argv, err, res, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// pyExecute runs code in the sandbox's Python kernel and returns its stdout.
func pyExecute(t testing.TB, c *agentclient.Client, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out strings.Builder
	err := c.Execute(ctx, agentclient.ExecuteRequest{Code: code, Language: "python"}, func(ev mcpbox.CodeEvent) {
		if ev.Type == "stdout" || ev.Type == "error" {
			out.WriteString(ev.Text)
		}
	})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return out.String()
}

// snapshot is every file under dir with a hash of its content.
func snapshot(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			out[p] = sha256.Sum256(b)
		}
		return nil
	})
	return out
}

// otherTag makes the image's python3 report another cache tag, as a
// python:3.13 image's would on this host: the host's bytecode does not
// serve it.
const otherTag = "cpython-399"

var otherTagFiles = map[string]string{
	"usr/lib/python3/dist-packages/sitecustomize.py": "import sys\nsys.implementation.cache_tag = '" + otherTag + "'\n",
}

// TestPyDriverPerTemplate: the first sandbox of a template whose python3
// has a cache tag of its own starts a build of the driver by that
// python3; later sandboxes of the template import the bytecode it made
// from /opt/mcpbox, and nothing else changes: the shared directory and
// the host's sandboxes stay as they were.
func TestPyDriverPerTemplate(t *testing.T) {
	var log logBuffer
	r, tm := pyRuntime(t, "tagged", withFiles(t, testutil.PythonImage(t), otherTagFiles), &log)
	checkPerTemplate(t, r, tm, &log)
}

// checkPerTemplate is TestPyDriverPerTemplate's body, for r with tm
// imported and nothing else made yet.
func checkPerTemplate(t *testing.T, r *Runtime, tm *mcpbox.Template, log *logBuffer) {
	t.Helper()
	shared := snapshot(t, r.kernels)
	if len(shared) == 0 {
		t.Fatal("no shared kernel drivers")
	}
	pyc := "/opt/mcpbox/__pycache__/" + kernel.PythonModule + "." + otherTag + ".pyc"
	probe := "import os, sys; print(sys.implementation.cache_tag, os.path.exists('" + pyc + "'))"

	c := pySandbox(t, r, "tagged")
	if out, _ := pyRun(t, c, "python3", "-c", probe); out != otherTag+" False\n" {
		t.Fatalf("first sandbox: %q, want the image's own tag and the shared directory", out)
	}
	r.py.wg.Wait()
	own := filepath.Join(r.home, pyDriverDir, r.pyDriverKey(tm))
	fi, err := os.Stat(filepath.Join(own, "__pycache__", kernel.PythonModule+"."+otherTag+".pyc"))
	if err != nil {
		t.Fatalf("no per-template bytecode: %v\n%s", err, log.String())
	}
	if fi.Mode().Perm() != 0o644 || fi.Size() > maxPyc {
		t.Errorf("bytecode %v, %d bytes", fi.Mode(), fi.Size())
	}
	if got := snapshot(t, r.kernels); len(got) != len(shared) {
		t.Errorf("the shared directory changed: %v, was %v", got, shared)
	}
	// The build's sandbox is gone.
	if list, _ := r.List(context.Background()); len(list) != 1 {
		t.Errorf("sandboxes after the build: %d, want 1", len(list))
	}

	// The source beside the bytecode is broken on purpose: a kernel
	// that compiled it instead of loading the bytecode would fail.
	if err := os.WriteFile(filepath.Join(own, kernel.PythonModule+".py"), []byte("raise SystemExit('compiled from source')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c2 := pySandbox(t, r, "tagged")
	if out, _ := pyRun(t, c2, "python3", "-c", probe); out != otherTag+" True\n" {
		t.Errorf("later sandbox: %q, want its own bytecode at /opt/mcpbox", out)
	}
	// The loader as the kernel's import uses it, without running the
	// module (it wants the kernel's pipes).
	_, verbose := pyRun(t, c2, "python3", "-v", "-c", "from importlib.machinery import SourceFileLoader as L; L('"+
		kernel.PythonModule+"', '/opt/mcpbox/"+kernel.PythonModule+".py').get_code('"+kernel.PythonModule+"')")
	if !strings.Contains(verbose, "code object from '"+pyc+"'") {
		t.Errorf("the driver was not loaded from %s: %s", pyc, verbose)
	}
	if out := pyExecute(t, c2, "import sys\nprint(6 * 7, sys.modules['"+kernel.PythonModule+"'].__file__)"); out != "42 /opt/mcpbox/"+kernel.PythonModule+".py\n" {
		t.Errorf("kernel: %q", out)
	}

	// The host's sandboxes keep the shared directory.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := testutil.ID()
	if _, err := r.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: mcpbox.Flavors["small"]}); err != nil {
		t.Fatal(err)
	}
	defer r.Destroy(context.Background(), id)
	hc := agentclient.ForSandbox(r, id)
	defer hc.Close()
	if out, _ := pyRun(t, hc, "sh", "-c", "ls /opt/mcpbox/__pycache__; head -c 20 /opt/mcpbox/"+kernel.PythonModule+".py"); strings.Contains(out, otherTag) || strings.Contains(out, "raise") {
		t.Errorf("a host sandbox sees the template's driver: %q", out)
	}
}

// TestPyDriverRootless runs TestPyDriverPerTemplate's checks as an
// unprivileged user (nobody), where PID 1 clones the driver directory
// by its path.
func TestPyDriverRootless(t *testing.T) {
	if os.Getenv("MCPBOX_PYDRIVER_INNER") != "" {
		var log logBuffer
		r, err := New(&Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Rootless() {
			t.Fatal("not rootless")
		}
		t.Cleanup(r.py.wg.Wait)
		checkPerTemplate(t, r, importTemplate(t, r, "tagged", withFiles(t, testutil.PythonImage(t), otherTagFiles)), &log)
		return
	}
	testutil.AsNobody(t, "TestPyDriverRootless", "MCPBOX_PYDRIVER_INNER=1", "PATH="+DefaultPath)
}

// TestPyDriverHostile: a template's python3 that hands back something
// else than the driver's bytecode (too big, misnamed, garbage, nothing)
// gives no driver directory and no crash; the shared directory is never
// written; the template keeps working (compiling the driver itself) and
// is not tried again at once.
func TestPyDriverHostile(t *testing.T) {
	// The scripts replace python3; the real one stays as python3.N.
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Skip("needs the host's python3")
	}
	py := "/usr/bin/" + filepath.Base(real)
	hostTag := "cpython-" + strings.ReplaceAll(strings.TrimPrefix(filepath.Base(real), "python"), ".", "")
	// A tag that leads from the new driver directory to the shared
	// one's bytecode, to overwrite it.
	escape := "/../../../../kernels/__pycache__/" + kernel.PythonModule + "." + hostTag
	// $4 is where the build asks for the bytecode.
	for _, tc := range []struct{ name, script, why string }{
		{"huge", py + ` -c "open('$4', 'wb').write(b'\x00\x00\r\n\x01' + bytes(4 << 20))"; echo cpython-311`, "larger than"},
		{"path in the tag", py + ` -c "$2" "$3" "$4" >/dev/null; echo ` + escape, "unexpected cache tag"},
		{"not bytecode", `echo garbage > "$4"; echo cpython-311`, "no valid header"},
		{"checked bytecode", py + ` -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2])" "$3" "$4"; echo cpython-311`, "not unchecked hash-based"},
		{"fails", `echo no >&2; exit 3`, "python3 failed (exit status 3): no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As a kernel, the script runs the real python3: the
			// template's sandboxes must work all the same.
			script := "#!/bin/sh\nif [ \"$1\" = -c ] && [ \"$4\" = " + pycInSandbox + " ]; then\n" + tc.script + "\nexit 0\nfi\nexec " + py + " \"$@\"\n"
			var log logBuffer
			r, tm := pyRuntime(t, "hostile", withFiles(t, testutil.PythonImage(t), map[string]string{"usr/bin/python3": script}), &log)
			shared := snapshot(t, r.kernels)
			c := pySandbox(t, r, "hostile")
			r.py.wg.Wait()
			if ents, err := os.ReadDir(filepath.Join(r.home, pyDriverDir)); len(ents) != 0 {
				t.Errorf("driver directories made: %v (%v)", ents, err)
			}
			got := snapshot(t, r.kernels)
			if len(got) != len(shared) {
				t.Errorf("the shared directory changed: %v", got)
			}
			for p, h := range shared {
				if got[p] != h {
					t.Errorf("%s changed", p)
				}
			}
			key := r.pyDriverKey(tm)
			r.py.mu.Lock()
			_, failed := r.py.failed[key]
			r.py.mu.Unlock()
			if !failed || !strings.Contains(log.String(), tc.why) {
				t.Errorf("failure recorded: %v; want %q logged:\n%s", failed, tc.why, log.String())
			}
			if out := pyExecute(t, c, "print(6 * 7)"); out != "42\n" {
				t.Errorf("kernel: %q", out)
			}
			// Another sandbox starts no second build.
			pySandbox(t, r, "hostile")
			r.py.mu.Lock()
			busy := r.py.busy[key]
			r.py.mu.Unlock()
			if busy {
				t.Error("a failed build was started again at once")
			}
		})
	}
}

// TestCheckPyc covers the header check on its own.
func TestCheckPyc(t *testing.T) {
	good := append([]byte{0xa7, 0x0d, '\r', '\n', 1, 0, 0, 0}, make([]byte, 100)...)
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"unchecked hash-based", good, true},
		{"empty", nil, false},
		{"short", good[:15], false},
		{"no magic", append([]byte("abcd"), good[4:]...), false},
		{"timestamp-based", append(append([]byte{}, good[:4]...), append([]byte{0, 0, 0, 0}, good[8:]...)...), false},
		{"checked hash-based", append(append([]byte{}, good[:4]...), append([]byte{3, 0, 0, 0}, good[8:]...)...), false},
		{"too big", append(append([]byte{}, good...), make([]byte, maxPyc)...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkPyc(tc.b); (err == nil) != tc.ok {
				t.Errorf("checkPyc: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// BenchmarkPyDriverLoad is what a template's kernel spends getting the
// driver's code object at start, in a template whose python3 has a tag
// of its own: compiled from the source, as in the template's first
// sandbox, or loaded from the bytecode its build made, as in later ones.
func BenchmarkPyDriverLoad(b *testing.B) {
	var log logBuffer
	r, _ := pyRuntime(b, "tagged", withFiles(b, testutil.PythonImage(b), otherTagFiles), &log)
	load := "import time\nfrom importlib.machinery import SourceFileLoader as L\nl = L('" + kernel.PythonModule + "', '/opt/mcpbox/" +
		kernel.PythonModule + ".py')\nt = time.perf_counter()\nfor _ in range(100): l.get_code('" + kernel.PythonModule + "')\n" +
		"print((time.perf_counter() - t) / 100 * 1e6)"
	for _, bc := range []string{"source", "bytecode"} {
		c := pySandbox(b, r, "tagged")
		r.py.wg.Wait() // the first sandbox started the build
		b.Run(bc, func(b *testing.B) {
			var us float64
			for range b.N {
				out, _ := pyRun(b, c, "python3", "-c", load)
				v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
				if err != nil {
					b.Fatal(out)
				}
				us += v
			}
			b.ReportMetric(us/float64(b.N), "µs/load")
		})
	}
}

// TestKernelsFor covers which driver directory a sandbox gets, and when
// a build is due, without making any sandbox.
func TestKernelsFor(t *testing.T) {
	py := &mcpbox.Template{Name: "py", Layers: []string{"sha256:aa", "sha256:bb"}, Languages: []mcpbox.Language{mcpbox.Python}}
	other := &mcpbox.Template{Name: "py", Layers: []string{"sha256:aa", "sha256:cc"}, Languages: []mcpbox.Language{mcpbox.Python}}
	node := &mcpbox.Template{Name: "node", Layers: []string{"sha256:dd"}, Languages: []mcpbox.Language{mcpbox.JavaScript}}
	newRT := func() *Runtime {
		return &Runtime{home: t.TempDir(), kernels: "/shared",
			py: pyDrivers{hostTag: "cpython-311", ready: map[string]bool{}, busy: map[string]bool{}, failed: map[string]time.Time{}}}
	}
	build := context.WithValue(context.Background(), pyBuildCtx{}, py)
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		tmpl    *mcpbox.Template
		prepare func(r *Runtime)
		want    string // "own" for py's directory
		build   bool
		err     bool
	}{
		{name: "host", tmpl: nil, want: "/shared"},
		{name: "no python", tmpl: node, want: "/shared"},
		{name: "first sandbox", tmpl: py, want: "/shared", build: true},
		{name: "built", tmpl: py, want: "own", prepare: func(r *Runtime) {
			d := filepath.Join(r.home, pyDriverDir, r.pyDriverKey(py))
			os.MkdirAll(d, 0o755)
			os.WriteFile(filepath.Join(d, kernel.PythonModule+".py"), nil, 0o644)
		}},
		{name: "other layers, same name", tmpl: other, want: "/shared", build: true, prepare: func(r *Runtime) {
			r.py.ready[r.pyDriverKey(py)] = true
		}},
		{name: "building", tmpl: py, want: "/shared", prepare: func(r *Runtime) { r.py.busy[r.pyDriverKey(py)] = true }},
		{name: "failed lately", tmpl: py, want: "/shared", prepare: func(r *Runtime) { r.py.failed[r.pyDriverKey(py)] = time.Now() }},
		{name: "failed long ago", tmpl: py, want: "/shared", build: true, prepare: func(r *Runtime) {
			r.py.failed[r.pyDriverKey(py)] = time.Now().Add(-pyRetryAfter - time.Minute)
		}},
		{name: "the build's own sandbox", ctx: build, tmpl: py, want: "/shared", prepare: func(r *Runtime) {
			r.py.ready[r.pyDriverKey(py)] = true
		}},
		{name: "a build from a template renamed meanwhile", ctx: build, tmpl: other, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRT()
			if tc.prepare != nil {
				tc.prepare(r)
			}
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			dir, b, err := r.kernelsFor(ctx, tc.tmpl)
			want := tc.want
			if want == "own" {
				want = filepath.Join(r.home, pyDriverDir, r.pyDriverKey(py))
			}
			if (err != nil) != tc.err || (err == nil && (dir != want || b != tc.build)) {
				t.Errorf("kernelsFor = %q, %v, %v; want %q, %v, error %v", dir, b, err, want, tc.build, tc.err)
			}
		})
	}
	if k1, k2 := newRT().pyDriverKey(py), newRT().pyDriverKey(other); k1 == k2 {
		t.Error("templates of different layers share a key")
	}
}
