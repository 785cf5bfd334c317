package testutil

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/mcpbox/mcpbox/template"
)

// layerWriter builds a test layer: host files copied in, or made up.
type layerWriter struct {
	t    testing.TB
	buf  bytes.Buffer
	tw   *tar.Writer
	seen map[string]bool
}

func newLayer(t testing.TB) *layerWriter {
	w := &layerWriter{t: t, seen: map[string]bool{}}
	w.tw = tar.NewWriter(&w.buf)
	return w
}

func (w *layerWriter) header(h *tar.Header, body []byte) {
	w.t.Helper()
	if w.seen[h.Name] {
		return
	}
	w.seen[h.Name] = true
	if h.ModTime.IsZero() {
		h.ModTime = time.Unix(1700000000, 0)
	}
	if err := w.tw.WriteHeader(h); err != nil {
		w.t.Fatal(err)
	}
	w.tw.Write(body)
}

func (w *layerWriter) file(name, body string, mode int64, uid int) {
	w.parents(name)
	w.header(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(body)), Uid: uid, Gid: uid}, []byte(body))
}

func (w *layerWriter) parents(name string) {
	for d := filepath.Dir(name); d != "." && d != "/"; d = filepath.Dir(d) {
		defer w.header(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	}
}

// host copies host path p (a file, a symlink or a whole directory) in at
// the same place, skipping names with any of skip in them.
func (w *layerWriter) host(p string, skip ...string) {
	w.t.Helper()
	filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		for _, s := range skip {
			if strings.Contains(path, s) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		name := strings.TrimPrefix(path, "/")
		w.parents(name)
		fi, err := os.Lstat(path)
		if err != nil {
			return nil
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			w.header(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil)
		case fi.IsDir():
			w.header(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: int64(fi.Mode().Perm())}, nil)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			w.header(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm()), Size: int64(len(b)), ModTime: fi.ModTime()}, b)
		}
		return nil
	})
}

// withLibs copies the shared libraries programs need (ldd), and the
// symlinks that lead to them.
func (w *layerWriter) withLibs(programs ...string) {
	w.t.Helper()
	out, err := exec.Command("ldd", programs...).Output()
	if err != nil && len(out) == 0 {
		w.t.Fatalf("ldd: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if !strings.HasPrefix(f, "/") {
				continue
			}
			for p := f; ; {
				w.host(p)
				fi, err := os.Lstat(p)
				if err != nil || fi.Mode()&os.ModeSymlink == 0 {
					break
				}
				t, _ := os.Readlink(p)
				if !filepath.IsAbs(t) {
					t = filepath.Join(filepath.Dir(p), t)
				}
				p = t
			}
			// Debian's merged /usr: the loader and libraries are named
			// through /lib64 and /lib, which are links.
			if real, err := filepath.EvalSymlinks(f); err == nil {
				w.host(real)
			}
		}
	}
}

func (w *layerWriter) layer() v1.Layer {
	w.t.Helper()
	if err := w.tw.Close(); err != nil {
		w.t.Fatal(err)
	}
	b := w.buf.Bytes()
	// Stored, not deflated: still the gzip layers real images have, but
	// tests under -race spent most of their time in compress/flate.
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}

var (
	pyImageOnce sync.Once
	pyImage     v1.Image
)

// PythonImage is a small image made from the host's own Python (so it
// runs here) that differs from the host's /usr the way a real image
// does: a module the host has not, no node, a user of its own, and a
// second layer with whiteouts, a hard link and a hostile symlink.
func PythonImage(t testing.TB) v1.Image {
	pyImageOnce.Do(func() {
		py, err := filepath.EvalSymlinks("/usr/bin/python3")
		if err != nil {
			t.Skip("needs the host's python3 to make a test image")
		}
		stdlib := filepath.Join("/usr/lib", filepath.Base(py))
		base := newLayer(t)
		for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
			base.header(&tar.Header{Name: l, Typeflag: tar.TypeSymlink, Linkname: "usr/" + l, Mode: 0o777}, nil)
		}
		progs := []string{py, "/usr/bin/dash", "/usr/bin/ls", "/usr/bin/cat", "/usr/bin/stat", "/usr/bin/id", "/usr/bin/readlink", "/usr/bin/mkdir", "/usr/bin/chmod", "/usr/bin/rm"}
		for _, p := range progs {
			base.host(p)
		}
		base.header(&tar.Header{Name: "usr/bin/python3", Typeflag: tar.TypeSymlink, Linkname: filepath.Base(py), Mode: 0o777}, nil)
		base.header(&tar.Header{Name: "usr/bin/sh", Typeflag: tar.TypeSymlink, Linkname: "dash", Mode: 0o777}, nil)
		dynload, _ := filepath.Glob(filepath.Join(stdlib, "lib-dynload", "*.so"))
		base.withLibs(append(progs, dynload...)...)
		base.host(stdlib, "/test/", "/idlelib", "/tkinter", "/ensurepip", "/lib2to3", "/turtledemo", "/__pycache__", "/pydoc_data")
		base.file("usr/lib/python3/dist-packages/imageonly.py", "VALUE = 42\n", 0o644, 0)
		base.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1234:app:/home/app:/bin/sh\n", 0o644, 0)
		base.file("etc/group", "root:x:0:\napp:x:1234:\n", 0o644, 0)
		base.file("etc/removed", "gone in the next layer\n", 0o644, 0)
		base.file("home/app/owned", "app's\n", 0o600, 1234)
		base.file("opt/data/old", "hidden by an opaque directory\n", 0o644, 0)
		top := newLayer(t)
		top.file("etc/.wh.removed", "", 0, 0)
		top.file("opt/data/.wh..wh..opq", "", 0, 0)
		top.file("opt/data/new", "new\n", 0o644, 0)
		top.header(&tar.Header{Name: "opt/data/link", Typeflag: tar.TypeLink, Linkname: "opt/data/new"}, nil)
		top.header(&tar.Header{Name: "hostpasswd", Typeflag: tar.TypeSymlink, Linkname: "/../../../../etc/shadow", Mode: 0o777}, nil)
		img, err := mutate.AppendLayers(empty.Image, base.layer(), top.layer())
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", runtime.GOARCH
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "IMAGE_VAR=from-image"}
		if pyImage, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
	})
	if pyImage == nil {
		t.Fatal("no test image")
	}
	return pyImage
}

// ImportPythonImage imports PythonImage into the template store at
// $home/templates as template name, as `mcpbox template import` does.
func ImportPythonImage(t testing.TB, home, name string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(PythonImage(t)); err != nil {
		t.Fatal(err)
	}
	s, err := template.Open(filepath.Join(home, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(context.Background(), name, dir, nil); err != nil {
		t.Fatal(err)
	}
}

// SingleFileImage is an image of one layer holding one file.
func SingleFileImage(t testing.TB, name, body string) v1.Image {
	t.Helper()
	w := newLayer(t)
	w.file(name, body, 0o644, 0)
	img, err := mutate.AppendLayers(empty.Image, w.layer())
	if err != nil {
		t.Fatal(err)
	}
	return img
}
