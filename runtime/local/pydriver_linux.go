package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agent/kernel"
	"github.com/mcpbox/mcpbox/agentclient"
)

// The Python driver, precompiled per template.
//
// The shared kernels directory holds the driver's bytecode for the host's
// python3 only. A template whose interpreter has another cache tag (an
// image of python:3.12 on a host with 3.11) finds none there, cannot
// write one (the directory is read-only), and compiles the driver at
// every kernel start. So each template with Python gets a driver
// directory of its own, $MCPBOX_HOME/template-kernels/<key>, holding the
// source and the bytecode its own python3 made; its sandboxes get that
// directory at /opt/mcpbox instead of the shared one, and the host's
// sandboxes, and those of templates without one yet, keep the shared one.
//
// A template's interpreter is code from an image, not to be trusted: its
// bytecode is only ever loaded by sandboxes of the same layers (the key
// hashes them), never put where another template's sandboxes look. Nor
// does the directory live under kernels/, which every sandbox sees.
//
// It is made once per key, by the template's python3 in a sandbox made
// for the purpose (no network, no kernels, small limits), started in the
// background after the first sandbox of the template was created: that
// create is not slowed, and a failure only leaves the template compiling
// at each start, as before. Not in the user's own sandbox, even before it
// is handed over: any code that ran in it could have replaced python3 in
// its root for every later sandbox of the template. Not at import or
// commit either: the template store knows nothing of sandboxes, and a
// store filled by an older version would never be done. The directory is
// made even when the tag is the host's: the host's bytecode would serve,
// but knowing the tag takes running the interpreter anyway, and this way
// no marker of "same as the host" can go stale when the host's python3
// changes. Directories of removed templates stay (a few KiB each).

// pyDriverDir is where per-template driver directories live in the home.
const pyDriverDir = "template-kernels"

// Bounds on what a template's interpreter hands back.
const (
	maxPyc = 1 << 20 // the driver's bytecode is about 20 KiB
	// pycInSandbox is where the build writes the bytecode: the
	// workspace, which every sandbox has and its user may write.
	pycInSandbox = Workspace + "/" + kernel.PythonModule + ".pyc"
	// pyBuildTimeout bounds a build, sandbox included.
	pyBuildTimeout = time.Minute
	// pyRetryAfter is how long a failed build is not tried again.
	pyRetryAfter = 10 * time.Minute
)

// cacheTag is the cache tags accepted from a template: they name a file.
var cacheTag = regexp.MustCompile(`^cpython-3[0-9]{1,3}$`)

// pyBuildFlavor is the build sandbox's size: one interpreter compiling
// one file.
var pyBuildFlavor = mcpbox.Flavor{Name: "kernel-driver", CPUs: 1, MemoryBytes: 256 << 20, DiskBytes: 64 << 20, Pids: 64}

// pyCompile runs in the build sandbox: it compiles the driver (argv[1],
// the shared source at /opt/mcpbox) to argv[2] and prints the cache tag.
// Unchecked hash-based bytecode is loaded whatever the source's mtime:
// the key already changes with the source.
const pyCompile = `import py_compile, sys
py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
print(sys.implementation.cache_tag)`

// pyDrivers is the runtime's record of per-template driver directories.
type pyDrivers struct {
	hostTag string        // the host python3's cache tag; "" without one
	sem     chan struct{} // one build at a time

	mu     sync.Mutex
	ready  map[string]bool      // keys whose directory exists
	busy   map[string]bool      // keys being built
	failed map[string]time.Time // keys whose last build failed, and when

	wg sync.WaitGroup // builds under way (tests wait for them)
}

// pyBuildCtx marks the context of a build sandbox's Create: the value is
// the template it must be made of.
type pyBuildCtx struct{}

// pySourceSum is the driver source's hash, made once.
var pySourceSum = sync.OnceValue(func() [32]byte { return sha256.Sum256(kernel.PythonSource()) })

// pyDriverKey names t's driver directory: the driver's source, t's layers
// and, since a template's root may include the host's, the host's tag.
func (r *Runtime) pyDriverKey(t *mcpbox.Template) string {
	h := sha256.New()
	fmt.Fprintf(h, "mcpbox python driver 1\n%x\n%s\n%s\n", pySourceSum(), r.py.hostTag, strings.Join(t.Layers, "\n"))
	return hex.EncodeToString(h.Sum(nil))
}

// kernelsFor returns the host directory of kernel drivers for a sandbox
// of template t (nil: the host's), and whether the caller, once the
// sandbox is made, should build t's own (startPyDriver). A build
// sandbox gets the shared directory, whose source it compiles, after a
// check that t is still the template the build was for: a name may have
// been given to other layers meanwhile.
func (r *Runtime) kernelsFor(ctx context.Context, t *mcpbox.Template) (dir string, build bool, err error) {
	if want, ok := ctx.Value(pyBuildCtx{}).(*mcpbox.Template); ok {
		if t == nil || !slices.Equal(t.Layers, want.Layers) {
			return "", false, fmt.Errorf("template %s changed while its kernel driver was being compiled", want.Name)
		}
		return r.kernels, false, nil
	}
	if t == nil || r.kernels == "" || !t.Has(mcpbox.Python) {
		return r.kernels, false, nil
	}
	key := r.pyDriverKey(t)
	r.py.mu.Lock()
	defer r.py.mu.Unlock()
	own := filepath.Join(r.home, pyDriverDir, key)
	if r.py.ready[key] {
		return own, false, nil
	}
	// Made by an earlier process, or another sharing the home.
	if _, err := os.Stat(filepath.Join(own, kernel.PythonModule+".py")); err == nil {
		r.py.ready[key] = true
		return own, false, nil
	}
	failed, ok := r.py.failed[key]
	return r.kernels, !r.py.busy[key] && (!ok || time.Since(failed) > pyRetryAfter), nil
}

// startPyDriver builds t's driver directory in the background, unless
// that is under way already.
func (r *Runtime) startPyDriver(t *mcpbox.Template) {
	key := r.pyDriverKey(t)
	r.py.mu.Lock()
	if r.py.busy[key] || r.py.ready[key] {
		r.py.mu.Unlock()
		return
	}
	r.py.busy[key] = true
	r.py.wg.Add(1)
	r.py.mu.Unlock()
	go func() {
		defer r.py.wg.Done()
		r.py.sem <- struct{}{}
		ctx, cancel := context.WithTimeout(context.Background(), pyBuildTimeout)
		tag, err := r.buildPyDriver(ctx, t, key)
		cancel()
		<-r.py.sem
		r.py.mu.Lock()
		delete(r.py.busy, key)
		if err != nil {
			r.py.failed[key] = time.Now()
		} else {
			r.py.ready[key] = true
			delete(r.py.failed, key)
		}
		r.py.mu.Unlock()
		if err != nil {
			r.log.Warn("the template's Python kernels will compile their driver at every start", "template", t.Name, "err", err)
			return
		}
		r.log.Info("compiled the Python kernel driver for the template's interpreter", "template", t.Name, "tag", tag)
	}()
}

// buildPyDriver has t's python3 compile the driver in a sandbox of its
// own and writes what it made, checked, to t's driver directory.
func (r *Runtime) buildPyDriver(ctx context.Context, t *mcpbox.Template, key string) (tag string, err error) {
	id := mcpbox.NewID()
	if _, err := r.Create(context.WithValue(ctx, pyBuildCtx{}, t), mcpbox.SandboxSpec{
		ID: id, Flavor: pyBuildFlavor, Template: t.Name, Ephemeral: true}); err != nil {
		return "", err
	}
	defer r.Destroy(context.WithoutCancel(ctx), id)
	c := agentclient.ForSandbox(r, id)
	defer c.Close()
	out, errOut := &capped{n: 256}, &capped{n: 1024}
	res, err := c.Run(ctx, agentclient.Command{Cmd: "python3",
		Args: []string{"-c", pyCompile, sandboxKernels + "/" + kernel.PythonModule + ".py", pycInSandbox}}, out, errOut)
	if err != nil {
		return "", fmt.Errorf("run python3: %w", err)
	}
	if res.ExitCode != 0 || !res.Exited {
		return "", fmt.Errorf("python3 failed (%s): %s", res.Status, bytes.TrimSpace(errOut.b))
	}
	tag = strings.TrimSpace(string(out.b))
	if !cacheTag.MatchString(tag) {
		return "", fmt.Errorf("python3 reported an unexpected cache tag %q", truncate(tag, 64))
	}
	rc, err := c.Download(ctx, pycInSandbox)
	if err != nil {
		return "", fmt.Errorf("read the bytecode back: %w", err)
	}
	pyc, err := io.ReadAll(io.LimitReader(rc, maxPyc+1))
	rc.Close()
	if err != nil {
		return "", fmt.Errorf("read the bytecode back: %w", err)
	}
	if err := checkPyc(pyc); err != nil {
		return "", err
	}
	return tag, r.writePyDriver(key, tag, pyc)
}

// checkPyc rejects what cannot be the driver's unchecked hash-based
// bytecode: the interpreter that loads it is the one that wrote it, so
// this guards the host's disk, not the sandboxes.
func checkPyc(b []byte) error {
	switch {
	case len(b) > maxPyc:
		return fmt.Errorf("the bytecode is larger than %d bytes", maxPyc)
	case len(b) < 16 || b[2] != '\r' || b[3] != '\n':
		return errors.New("the bytecode has no valid header")
	case b[4] != 1 || b[5]|b[6]|b[7] != 0:
		return errors.New("the bytecode is not unchecked hash-based")
	}
	return nil
}

// writePyDriver writes the driver's directory for key, whole or not at
// all: a temporary directory renamed into place.
func (r *Runtime) writePyDriver(key, tag string, pyc []byte) error {
	parent := filepath.Join(r.home, pyDriverDir)
	// Not MkdirAll: a home removed meanwhile (a test's) stays removed.
	if err := os.Mkdir(parent, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	// What a process that died while writing left, long enough ago not
	// to be another's write under way.
	old, _ := filepath.Glob(filepath.Join(parent, ".tmp-*"))
	for _, p := range old {
		if fi, err := os.Lstat(p); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(p)
		}
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // nothing is left there once renamed
	// Readable by every sandbox's user, like the shared directory; the
	// home's 0700 keeps the host's other users out.
	files := []struct {
		path string
		data []byte // nil: a directory
	}{
		{tmp, nil},
		{filepath.Join(tmp, kernel.PythonModule+".py"), kernel.PythonSource()},
		{filepath.Join(tmp, "__pycache__"), nil},
		{filepath.Join(tmp, "__pycache__", kernel.PythonModule+"."+tag+".pyc"), pyc},
	}
	for _, f := range files {
		mode := os.FileMode(0o644)
		switch {
		case f.path == tmp:
			mode = 0o755
		case f.data == nil:
			mode = 0o755
			err = os.Mkdir(f.path, mode)
		default:
			err = os.WriteFile(f.path, f.data, mode)
		}
		if err == nil {
			err = os.Chmod(f.path, mode) // whatever the umask
		}
		if err != nil {
			return err
		}
	}
	dst := filepath.Join(parent, key)
	if err := os.Rename(tmp, dst); err != nil {
		if _, serr := os.Stat(filepath.Join(dst, kernel.PythonModule+".py")); serr == nil {
			return nil // another process made it first
		}
		return err
	}
	return nil
}

// capped keeps the first n bytes written to it and drops the rest.
type capped struct {
	b []byte
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
