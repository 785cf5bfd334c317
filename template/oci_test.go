package template

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
)

// hostileImage has two layers with what a hostile or merely unusual
// image holds: whiteouts (plain and opaque), hard links within a layer
// and to a lower one, absolute symlinks to host paths, a symlinked
// directory written through, `../` names, a device node, a setuid file
// and a file owned by a non-root user.
func hostileImage(t testing.TB) v1.Image {
	owned := file("home/app/owned", "mine\n")
	owned.hdr.Uid, owned.hdr.Gid = 1234, 1235
	setuid := file("usr/bin/su", "#!/bin/sh\n")
	setuid.hdr.Mode = 0o4755
	dev := entry{hdr: tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o666}}
	fakeWhiteout := entry{hdr: tar.Header{Name: "etc/hidden", Typeflag: tar.TypeChar, Mode: 0o600}}
	base := layerOf(t,
		dir("etc"), file("etc/os-release", "ID=test\n"), file("etc/hidden", "still here\n"),
		dir("usr"), dir("usr/bin"), file("usr/bin/python3", "#!fake\n"), hardlink("usr/bin/python3.11", "usr/bin/python3"),
		symlink("bin", "usr/bin"), setuid, owned,
		dir("data"), file("data/gone", "x"), dir("data/old"), file("data/old/x", "old"),
		symlink("abs", "/etc/shadow"), symlink("lnk", "/"), dev,
	)
	top := layerOf(t,
		file("data/.wh.gone", ""), file("data/old/.wh..wh..opq", ""), file("data/old/new", "new"),
		file("../../escape", "out"), file("lnk/etc/through-link", "in"),
		hardlink("usr/bin/lowlink", "etc/os-release"), fakeWhiteout,
		file("bin/from-top", "via lower symlink"),
	)
	return imageOf(t, []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, base, top)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: layers are owned by mapped uids (CI runs as root)")
	}
}

func TestImportLayoutHostile(t *testing.T) {
	requireRoot(t)
	s := testStore(t, &Options{UIDBase: 200000})
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(hostileImage(t)); err != nil {
		t.Fatal(err)
	}
	var lines []string
	tm, err := s.Import(context.Background(), "hostile", filepath.Join(dir, "oci"), func(m string) { lines = append(lines, m) })
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Layers) != 2 || len(lines) == 0 {
		t.Fatalf("layers %v, progress %q", tm.Layers, lines)
	}
	if tm.Env["LANG"] != "C.UTF-8" || tm.User != "1000" || tm.Workdir != "/srv" {
		t.Errorf("metadata not kept: %+v", tm)
	}
	if !tm.Has(mcpbox.Python) {
		t.Errorf("python3 in usr/bin not found: languages %v", tm.Languages)
	}
	l0, l1 := s.LayerDir(tm.Layers[0]), s.LayerDir(tm.Layers[1])

	t.Run("owners mapped", func(t *testing.T) {
		st := stat(t, filepath.Join(l0, "home/app/owned"))
		if st.Uid != 201234 || st.Gid != 201235 {
			t.Errorf("owned by %d:%d, want 201234:201235", st.Uid, st.Gid)
		}
		if st := stat(t, filepath.Join(l0, "etc/os-release")); st.Uid != 200000 {
			t.Errorf("root's file owned by %d, want 200000", st.Uid)
		}
	})
	t.Run("setuid dropped", func(t *testing.T) {
		if m := stat(t, filepath.Join(l0, "usr/bin/su")).Mode; m&(unix.S_ISUID|unix.S_ISGID) != 0 || m&0o777 != 0o755 {
			t.Errorf("mode %o", m)
		}
	})
	t.Run("devices skipped", func(t *testing.T) {
		if _, err := os.Lstat(filepath.Join(l0, "dev/sda")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("device node stored: %v", err)
		}
		// A 0/0 device in an image must not become a whiteout.
		if _, err := os.Lstat(filepath.Join(l1, "etc/hidden")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("image's char device stored: %v", err)
		}
	})
	t.Run("hard links", func(t *testing.T) {
		a, b := stat(t, filepath.Join(l0, "usr/bin/python3")), stat(t, filepath.Join(l0, "usr/bin/python3.11"))
		if a.Ino != b.Ino {
			t.Error("hard link in one layer is a copy")
		}
		if got, _ := os.ReadFile(filepath.Join(l1, "usr/bin/lowlink")); string(got) != "ID=test\n" {
			t.Errorf("hard link to a lower layer reads %q", got)
		}
	})
	t.Run("symlinks kept, never followed", func(t *testing.T) {
		if target, _ := os.Readlink(filepath.Join(l0, "abs")); target != "/etc/shadow" {
			t.Errorf("abs -> %q", target)
		}
		if got, _ := os.ReadFile(filepath.Join(l1, "etc/through-link")); string(got) != "in" {
			t.Errorf("lnk/etc/through-link (lnk -> /) did not land in the layer's /etc: %q", got)
		}
		if _, err := os.Stat("/etc/through-link"); err == nil {
			t.Fatal("a layer wrote through a symlink onto the host")
		}
		// bin -> usr/bin is in the lower layer: the top layer's
		// bin/from-top must go where it leads, not shadow the link.
		if _, err := os.Lstat(filepath.Join(l1, "usr/bin/from-top")); err != nil {
			t.Errorf("write beneath a lower layer's symlink: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(l1, "bin")); err == nil {
			t.Error("the top layer shadows the lower layer's bin symlink")
		}
	})
	t.Run("../ stays inside", func(t *testing.T) {
		if got, _ := os.ReadFile(filepath.Join(l1, "escape")); string(got) != "out" {
			t.Errorf("../../escape not at the layer's root: %q", got)
		}
		for _, p := range []string{filepath.Join(s.Dir(), "escape"), filepath.Join(filepath.Dir(s.Dir()), "escape"), filepath.Join(s.LayersDir(), "escape")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s written outside the layer", p)
			}
		}
	})
	t.Run("whiteouts", func(t *testing.T) {
		st := stat(t, filepath.Join(l1, "data/gone"))
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("data/gone is not a 0/0 whiteout: mode %o rdev %d", st.Mode, st.Rdev)
		}
		buf := make([]byte, 8)
		n, err := unix.Lgetxattr(filepath.Join(l1, "data/old"), xattrOpaque, buf)
		if err != nil || string(buf[:n]) != "y" {
			t.Errorf("data/old not opaque: %q %v", buf[:n], err)
		}
		if s.lookup(tm.Layers, "data/gone") || !s.lookup(tm.Layers, "data/old/new") {
			t.Error("merged view wrong")
		}
	})
}

func stat(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestPullFromRegistryAndShareLayers(t *testing.T) {
	requireRoot(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	base := layerOf(t, dir("usr"), dir("usr/bin"), file("usr/bin/node", "#!fake\n"))
	a := imageOf(t, nil, base, layerOf(t, file("a.txt", "a")))
	b := imageOf(t, nil, base, layerOf(t, file("b.txt", "b")))
	for tag, img := range map[string]v1.Image{"a": a, "b": b} {
		ref, err := name.ParseReference(u.Host+"/test/img:"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	s := testStore(t, nil)
	ctx := context.Background()
	ta, err := s.Pull(ctx, "ta", u.Host+"/test/img:a", &PullOptions{Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Pull(ctx, "tb", u.Host+"/test/img:b", &PullOptions{Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ta.Layers[0] != tb.Layers[0] || !ta.Has(mcpbox.JavaScript) {
		t.Fatalf("base layer not shared, or node not found: %v %v %v", ta.Layers, tb.Layers, ta.Languages)
	}
	ents, _ := os.ReadDir(s.LayersDir())
	if len(ents) != 3 {
		t.Errorf("%d layers stored for two images sharing a base, want 3", len(ents))
	}
	if _, err := s.Pull(ctx, "missing", u.Host+"/test/none:latest", &PullOptions{Insecure: true}, nil); mcpbox.ErrorCode(err) != mcpbox.EUNAVAILABLE {
		t.Errorf("missing image: %v", err)
	}

	// Removing one keeps the shared layer; removing both frees it all.
	if err := s.Remove(ctx, "ta"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.LayerDir(tb.Layers[0])); err != nil {
		t.Fatalf("shared layer removed with one of its templates: %v", err)
	}
	if err := s.Remove(ctx, "tb"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(s.LayersDir()); len(ents) != 0 {
		t.Errorf("%d layers left after removing every template", len(ents))
	}
}

func TestDockerSaveTarball(t *testing.T) {
	requireRoot(t)
	img := imageOf(t, nil, layerOf(t, dir("usr"), dir("usr/bin"), file("usr/bin/python3", "x")))
	p := filepath.Join(t.TempDir(), "img.tar")
	tag, _ := name.NewTag("example.test/img:1")
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	s := testStore(t, nil)
	tm, err := s.Import(context.Background(), "saved", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("saved")
	if err != nil || got.Layers[0] != tm.Layers[0] || !got.Has(mcpbox.Python) {
		t.Fatalf("%+v %v", got, err)
	}
	junk := filepath.Join(t.TempDir(), "junk.tar")
	os.WriteFile(junk, []byte("not a tar"), 0o600)
	if _, err := s.Import(context.Background(), "junk", junk, nil); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("junk tarball: %v", err)
	}
}

// lyingLayer claims a digest its contents do not have.
type lyingLayer struct{ v1.Layer }

func (lyingLayer) DiffID() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("ab", 32))
}

func TestCorruptAndMissingLayers(t *testing.T) {
	requireRoot(t)
	s := testStore(t, nil)
	ctx := context.Background()
	img := imageOf(t, nil, layerOf(t, file("x", "x")))
	ls, _ := img.Layers()
	bad, err := s.FromImage(ctx, "bad", fakeImage{img, []v1.Layer{lyingLayer{ls[0]}}}, "test", nil)
	if err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("layer with a wrong digest: %v %v", bad, err)
	}
	if _, err := s.Get("bad"); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
		t.Errorf("a failed import left a template: %v", err)
	}
	tm, err := s.FromImage(ctx, "good", img, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.LayerDir(tm.Layers[0])); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get("good")
	if mcpbox.ErrorCode(err) != mcpbox.EUNAVAILABLE || !strings.Contains(err.Error(), "missing or corrupt") {
		t.Errorf("missing layer: %v", err)
	}
	// Pulling it again repairs it.
	if _, err := s.FromImage(ctx, "good", img, "test", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("good"); err != nil {
		t.Errorf("after re-import: %v", err)
	}
}

// fakeImage replaces an image's layers.
type fakeImage struct {
	v1.Image
	layers []v1.Layer
}

func (f fakeImage) Layers() ([]v1.Layer, error) { return f.layers, nil }

func TestNamesAndInUse(t *testing.T) {
	requireRoot(t)
	users := []string{}
	s := testStore(t, &Options{InUse: func(ctx context.Context, name string) ([]string, error) { return users, nil }})
	ctx := context.Background()
	if _, err := s.FromImage(ctx, "busy", imageOf(t, nil, layerOf(t, file("x", "x"))), "test", nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"../x", "Upper", "", "a/b"} {
		if _, err := s.FromImage(ctx, n, empty.Image, "test", nil); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("name %q: %v", n, err)
		}
	}
	_, err := s.Get("nosuch")
	if mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND || !strings.Contains(err.Error(), "default, busy") {
		t.Errorf("unknown template: %v", err)
	}
	_, err = s.Get("code-interpreter-v1")
	if !strings.Contains(err.Error(), `"code-interpreter"`) || !strings.Contains(strings.Join(mcpbox.ErrorSuggestions(err), " "), "mcpbox template build code-interpreter") {
		t.Errorf("alias of an unbuilt recipe: %v %v", err, mcpbox.ErrorSuggestions(err))
	}
	if tm, err := s.Get("base"); err != nil || tm.Name != "default" {
		t.Errorf("base: %v %v", tm, err)
	}
	users = []string{"session abc"}
	if err := s.Remove(ctx, "busy"); mcpbox.ErrorCode(err) != mcpbox.ECONFLICT || !strings.Contains(err.Error(), "session abc") {
		t.Errorf("remove in use: %v", err)
	}
	if _, err := s.Get("busy"); err != nil {
		t.Errorf("refused remove removed it: %v", err)
	}
	users = nil
	if err := s.Remove(ctx, "busy"); err != nil {
		t.Error(err)
	}
	if err := s.Remove(ctx, "default"); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("remove default: %v", err)
	}
}

// TestHostileLinks: hard links and whiteouts whose names climb out of the
// layer reach nothing outside it.
func TestHostileLinks(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	for name, layer := range map[string]v1.Layer{
		"hard link to a host file":    layerOf(t, hardlink("passwd", "../../../../../../etc/passwd")),
		"hard link through a symlink": layerOf(t, symlink("up", "/etc"), hardlink("passwd", "up/passwd")),
	} {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, nil)
			var before unix.Stat_t
			unix.Stat("/etc/passwd", &before)
			_, err := s.FromImage(ctx, "hostile", imageOf(t, nil, layer), "test", nil)
			if err == nil || !strings.Contains(err.Error(), "which no layer has") {
				t.Errorf("import: %v", err)
			}
			var after unix.Stat_t
			unix.Stat("/etc/passwd", &after)
			if after.Nlink != before.Nlink {
				t.Fatalf("/etc/passwd gained a link: %d -> %d", before.Nlink, after.Nlink)
			}
		})
	}
	// A whiteout climbing out removes nothing outside the layer.
	outside := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(outside, []byte("x"), 0o600)
	s := testStore(t, nil)
	rel, _ := filepath.Rel(s.LayersDir(), outside)
	wh := filepath.Join(filepath.Dir(rel), ".wh."+filepath.Base(rel))
	if _, err := s.FromImage(ctx, "wh", imageOf(t, nil, layerOf(t, file(wh, ""))), "test", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a whiteout removed a file outside the layer: %v", err)
	}
}
