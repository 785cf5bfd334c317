package template

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
)

// TestCommitAndExport commits an overlay upper directory (as a sandbox
// leaves it: new files, a whiteout, an opaque directory, a file of the
// sandbox's user) on top of a template, then exports the result as an OCI
// layout and imports it into another store: both see the same tree.
func TestCommitAndExport(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := testStore(t, nil)
	if _, err := s.FromImage(ctx, "basis", imageOf(t, []string{"A=1"},
		layerOf(t, dir("etc"), file("etc/keep", "k"), file("etc/drop", "d"), dir("opt"), dir("opt/d"), file("opt/d/old", "o"), dir("usr"), dir("usr/bin"), file("usr/bin/python3", "x"))),
		"test", nil); err != nil {
		t.Fatal(err)
	}
	upper := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(upper, "home/user/.local/lib"), 0o755))
	must(os.WriteFile(filepath.Join(upper, "home/user/.local/lib/mod.py"), []byte("V = 7\n"), 0o644))
	must(os.Chown(filepath.Join(upper, "home/user/.local/lib/mod.py"), 101000, 101000))
	must(os.Link(filepath.Join(upper, "home/user/.local/lib/mod.py"), filepath.Join(upper, "home/user/.local/lib/mod2.py")))
	must(os.Mkdir(filepath.Join(upper, "etc"), 0o755))
	must(unix.Mknod(filepath.Join(upper, "etc/drop"), unix.S_IFCHR, 0))
	must(os.MkdirAll(filepath.Join(upper, "opt/d"), 0o755))
	must(unix.Setxattr(filepath.Join(upper, "opt/d"), xattrOpaque, []byte("y"), 0))
	must(os.WriteFile(filepath.Join(upper, "opt/d/new"), []byte("n"), 0o644))

	c, err := s.Commit(ctx, "committed", "basis", upper, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Layers) != 2 || c.Parent != "basis" || c.Env["A"] != "1" || !c.Has(mcpbox.Python) {
		t.Fatalf("%+v", c)
	}
	check := func(t *testing.T, s *Store, layers []string) {
		for rel, want := range map[string]bool{
			"etc/keep": true, "etc/drop": false, "opt/d/old": false, "opt/d/new": true,
			"home/user/.local/lib/mod.py": true, "home/user/.local/lib/mod2.py": true,
		} {
			if got := s.lookup(layers, rel); got != want {
				t.Errorf("%s: present %v, want %v", rel, got, want)
			}
		}
		st := stat(t, filepath.Join(s.LayerDir(layers[len(layers)-1]), "home/user/.local/lib/mod.py"))
		if st.Uid != 101000 || st.Nlink != 2 {
			t.Errorf("mod.py: uid %d, links %d", st.Uid, st.Nlink)
		}
	}
	t.Run("commit", func(t *testing.T) { check(t, s, c.Layers) })

	out := filepath.Join(t.TempDir(), "oci")
	if _, err := s.Export(ctx, "committed", out, nil); err != nil {
		t.Fatal(err)
	}
	s2 := testStore(t, nil)
	back, err := s2.Import(ctx, "back", out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Env["A"] != "1" || back.User != c.User {
		t.Errorf("config not exported: %+v", back)
	}
	t.Run("export round trip", func(t *testing.T) { check(t, s2, back.Layers) })
}

// TestCommitOnTheHostSystem commits uppers of host-template sessions: the
// template is based on the host's system (its layer holds only what the
// session wrote, its languages and shell are the host's), a commit of a
// session of it stays so, and neither can be exported. The usual checks
// on names still apply.
func TestCommitOnTheHostSystem(t *testing.T) {
	ctx := context.Background()
	s := testStore(t, nil)
	upper := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(upper, "home/user/.local/bin"), 0o755))
	must(os.WriteFile(filepath.Join(upper, "home/user/.local/bin/tool"), []byte("#!/bin/sh\n"), 0o755))
	must(os.MkdirAll(filepath.Join(upper, "workspace"), 0o755))
	must(os.WriteFile(filepath.Join(upper, "workspace/notes"), []byte("n"), 0o644))

	for _, tc := range []struct{ name, parent string }{
		{"default", ""}, {"base", ""}, {"code-interpreter-v1", "default"}, {"Bad Name", ""},
	} {
		if _, err := s.Commit(ctx, tc.name, tc.parent, upper, nil); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("commit to %q: %v, want %s", tc.name, err, mcpbox.EINVALID)
		}
	}
	host := Host()
	for _, parent := range []string{"", "default", "base"} {
		c, err := s.Commit(ctx, "onhost", parent, upper, nil)
		if err != nil {
			t.Fatalf("commit of a session of %q: %v", parent, err)
		}
		if !c.HostSystem || c.Parent != mcpbox.HostTemplate || len(c.Layers) != 1 || c.Source != "commit" ||
			c.Workdir != host.Workdir || c.Shell != host.Shell || !slices.Equal(c.Languages, host.Languages) {
			t.Fatalf("commit of a session of %q: %+v", parent, c)
		}
	}
	got, err := s.Get("onhost")
	if err != nil || !got.HostSystem || !slices.Equal(got.Languages, host.Languages) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if !s.lookup(got.Layers, "home/user/.local/bin/tool") || !s.lookup(got.Layers, "workspace/notes") {
		t.Error("the layer lacks what the session wrote")
	}

	upper2 := t.TempDir()
	must(os.MkdirAll(filepath.Join(upper2, "workspace"), 0o755))
	must(os.WriteFile(filepath.Join(upper2, "workspace/more"), []byte("m"), 0o644))
	c2, err := s.Commit(ctx, "onhost2", "onhost", upper2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.HostSystem || c2.Parent != "onhost" || len(c2.Layers) != 2 || c2.Layers[0] != got.Layers[0] || !slices.Equal(c2.Languages, host.Languages) {
		t.Fatalf("commit on a host-based template: %+v", c2)
	}
	if _, err := s.Commit(ctx, "onhost2", "onhost2", upper2, nil); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("commit onto the session's own template: %v", err)
	}

	for _, name := range []string{"onhost", "onhost2", "default"} {
		_, err := s.Export(ctx, name, filepath.Join(t.TempDir(), "oci"), nil)
		if mcpbox.ErrorCode(err) != mcpbox.EUNSUPPORTED || !strings.Contains(err.Error(), "/usr") {
			t.Errorf("export of %s: %v", name, err)
		}
	}
	// Removing the first keeps the layer the second still uses.
	must(s.Remove(ctx, "onhost"))
	if _, err := s.Get("onhost2"); err != nil {
		t.Errorf("after removing its parent: %v", err)
	}
}

// TestExportImportStoresOnce exports a template and imports the layout
// into the same store: the layers are found, not stored a second time,
// and the alias goes when its layer does.
func TestExportImportStoresOnce(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := testStore(t, nil)
	orig, err := s.FromImage(ctx, "orig", imageOf(t, nil,
		layerOf(t, dir("etc"), file("etc/a", "a")), layerOf(t, dir("opt"), file("opt/b", "b"))), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "oci")
	if _, err := s.Export(ctx, "orig", out, nil); err != nil {
		t.Fatal(err)
	}
	back, err := s.Import(ctx, "back", out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Layers, orig.Layers) {
		t.Errorf("the import stored its own layers %v, not the exported %v", back.Layers, orig.Layers)
	}
	ents, err := os.ReadDir(s.LayersDir())
	if err != nil || len(ents) != 2 {
		t.Errorf("layers stored: %d (%v), want 2", len(ents), err)
	}
	for _, n := range []string{"orig", "back"} {
		if err := s.Remove(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(s.dir, "layerinfo", "*")); len(left) != 0 {
		t.Errorf("left after the layers went: %v", left)
	}
}
