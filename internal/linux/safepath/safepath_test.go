package safepath

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzRel checks that whatever Rel accepts lies beneath its root, and
// that components never yields a way up.
func FuzzRel(f *testing.F) {
	for _, s := range [][2]string{{"/srv", "/srv/a"}, {"/", "/etc"}, {"/srv", "/srvx"}, {"/a/b", "/a"}, {"/srv", "/srv/../etc"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, root, path string) {
		rel, err := Rel(root, path)
		if err != nil {
			return
		}
		if filepath.Join(root, rel) != path {
			t.Fatalf("Rel(%q, %q) = %q, which does not lead back", root, path, rel)
		}
		parts, err := components(rel)
		if err != nil {
			t.Fatalf("Rel(%q, %q) = %q, which components refuses: %v", root, path, rel, err)
		}
		for _, p := range parts {
			if p == ".." || p == "." || p == "" || strings.Contains(p, "/") {
				t.Fatalf("Rel(%q, %q) gives component %q", root, path, p)
			}
		}
	})
}
