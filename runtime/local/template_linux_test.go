package local_test

import (
	"archive/tar"
	"bytes"
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

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/runtime/local"
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
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}

var (
	pyImageOnce sync.Once
	pyImage     v1.Image
)

// pythonImage is a small image made from the host's own Python (so it
// runs here) that differs from the host's /usr the way a real image
// does: a module the host has not, no node, a user of its own, and a
// second layer with whiteouts, a hard link and a hostile symlink.
func pythonImage(t testing.TB) v1.Image {
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

// importImage writes img as an OCI layout and imports it into rt's
// template store as name.
func importImage(t testing.TB, rt *local.Runtime, name string, img v1.Image) *mcpbox.Template {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	s, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := s.Import(context.Background(), name, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func newTemplateSandbox(t testing.TB, rt *local.Runtime, tmpl string) (*mcpbox.Sandbox, *agentclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: mcpbox.Flavors["small"], Template: tmpl,
		Prestart: []mcpbox.Language{mcpbox.Python}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Destroy(context.Background(), sb.ID) })
	c := agentclient.ForSandbox(rt, sb.ID)
	t.Cleanup(func() { c.Close() })
	return sb, c
}

// TestTemplateSandboxSeesTheImage runs code in a sandbox made from an
// imported image: the image's Python and modules, its users and owners,
// its whiteouts applied, and nothing of the host's /usr.
func TestTemplateSandboxSeesTheImage(t *testing.T) {
	rt := newRuntime(t)
	tm := importImage(t, rt, "pyimg", pythonImage(t))
	if !tm.Has(mcpbox.Python) || tm.Has(mcpbox.JavaScript) {
		t.Fatalf("languages %v", tm.Languages)
	}
	sb, c := newTemplateSandbox(t, rt, "pyimg")
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"python and a module only the image has", []string{"python3", "-c", "import imageonly, sys; print(imageonly.VALUE, sys.executable)"}, "42 /usr/bin/python3\n"},
		{"owner mapped", []string{"stat", "-c", "%u:%g %a", "/home/app/owned"}, "1234:1234 600\n"},
		{"user code's user", []string{"sh", "-c", "id -u; id -un; echo $HOME $IMAGE_VAR; pwd"}, "1000\nuser\n/home/user from-image\n/workspace\n"},
		{"whiteout", []string{"sh", "-c", "ls /etc/removed 2>/dev/null || echo absent"}, "absent\n"},
		{"opaque directory and hard link", []string{"sh", "-c", "ls /opt/data; stat -c %h /opt/data/new"}, "link\nnew\n2\n"},
		{"absolute symlink stays in the sandbox", []string{"sh", "-c", "readlink /hostpasswd; cat /hostpasswd 2>/dev/null || echo unreadable"}, "/../../../../etc/shadow\nunreadable\n"},
		{"no host /usr", []string{"sh", "-c", "ls /usr/bin/node /usr/bin/gcc 2>/dev/null; echo done"}, "done\n"},
		{"writes go to the sandbox's disk", []string{"sh", "-c", "echo hi > /workspace/f && cat /workspace/f && echo x > /tmp/new && cat /tmp/new"}, "hi\nx\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, res := run(t, c, 20*time.Second, tc.argv...)
			if out != tc.want || res.ExitCode != 0 {
				t.Errorf("%q: %q (stderr %q) exit %d, want %q", tc.argv, out, errOut, res.ExitCode, tc.want)
			}
		})
	}
	// What the sandbox wrote stays in it: the layer is untouched.
	s, _ := rt.Templates()
	if _, err := os.Stat(filepath.Join(s.LayerDir(tm.Layers[0]), "tmp/new")); err == nil {
		t.Error("a sandbox's write reached the shared layer")
	}
	users, err := rt.TemplateUsers(context.Background(), "pyimg")
	if err != nil || len(users) != 1 || !strings.Contains(users[0], sb.ID) {
		t.Errorf("users of the template: %v %v", users, err)
	}
}

// TestTemplateBrokenLayer: a template whose layer went missing is refused
// with a clear error, never a sandbox with a hole in its root.
func TestTemplateBrokenLayer(t *testing.T) {
	rt := newRuntime(t)
	tm := importImage(t, rt, "broken", pythonImage(t))
	s, _ := rt.Templates()
	if err := os.Rename(s.LayerDir(tm.Layers[1]), s.LayerDir(tm.Layers[1])+".moved"); err != nil {
		t.Fatal(err)
	}
	_, err := rt.Create(context.Background(), mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: mcpbox.Flavors["small"], Template: "broken"})
	if err == nil || !strings.Contains(err.Error(), "missing or corrupt") {
		t.Fatalf("create from a template with a missing layer: %v", err)
	}
	if _, err := rt.Create(context.Background(), mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: mcpbox.Flavors["small"], Template: "nosuch"}); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
		t.Errorf("unknown template: %v", err)
	}
}

// TestTemplateCommit commits a session in which the user installed a
// module with `pip install --user`'s layout and wrote and deleted files;
// a new session from the commit finds them as they were left.
func TestTemplateCommit(t *testing.T) {
	rt := newRuntime(t)
	importImage(t, rt, "pybase", pythonImage(t))
	sb, c := newTemplateSandbox(t, rt, "pybase")
	line := `set -e
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site" && echo 'ANSWER = 6 * 7' > "$site/usermod.py"
echo kept > /workspace/notes.txt
echo '#!/bin/sh' > /tmp/tool && chmod 755 /tmp/tool
echo done`
	if out, errOut, res := run(t, c, 20*time.Second, "sh", "-c", line); out != "done\n" || res.ExitCode != 0 {
		t.Fatalf("set-up: %q %q %d", out, errOut, res.ExitCode)
	}
	s, _ := rt.Templates()
	upper, err := rt.UpperDir(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := rt.SandboxTemplate(sb.ID)
	if err != nil || parent != "pybase" {
		t.Fatalf("sandbox's template: %q %v", parent, err)
	}
	tm, err := s.Commit(context.Background(), "pycommit", parent, upper, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Layers) != 3 || tm.Parent != "pybase" {
		t.Fatalf("%+v", tm)
	}
	_, c2 := newTemplateSandbox(t, rt, "pycommit")
	out, errOut, res := run(t, c2, 20*time.Second, "sh", "-c",
		`python3 -c 'import usermod; print(usermod.ANSWER)'; cat /workspace/notes.txt; stat -c '%u %a' /workspace/notes.txt /tmp/tool; ls /etc/removed 2>/dev/null || echo still-removed`)
	want := "42\nkept\n1000 644\n1000 755\nstill-removed\n"
	if out != want || res.ExitCode != 0 {
		t.Errorf("new session from the commit: %q (stderr %q), want %q", out, errOut, want)
	}
}
