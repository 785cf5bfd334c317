//go:build linux

package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetLimits writes limits into stand-in directories of regular files,
// so the v2 file names and formats are checked on hosts without a v2
// controller, and without root.
func TestSetLimits(t *testing.T) {
	limits := Limits{CPUs: 1.5, MemoryBytes: 64 << 20, Pids: 32}
	tests := []struct {
		name string
		h    hierarchy
		want map[string]string // file → content; every file is created empty first
	}{
		{"v1 memory", hierarchy{controllers: []string{"memory"}}, map[string]string{
			"memory.limit_in_bytes": "67108864", "memory.memsw.limit_in_bytes": "67108864"}},
		{"v1 memory without swap accounting", hierarchy{controllers: []string{"memory"}}, map[string]string{
			"memory.limit_in_bytes": "67108864"}},
		{"v1 pids", hierarchy{controllers: []string{"pids"}}, map[string]string{"pids.max": "32"}},
		{"v1 cpu", hierarchy{controllers: []string{"cpu"}}, map[string]string{"cpu.cfs_quota_us": "150000"}},
		{"v1 freezer", hierarchy{controllers: []string{"freezer"}}, map[string]string{}},
		{"v2", hierarchy{v2: true, controllers: []string{"memory", "pids", "cpu"}}, map[string]string{
			"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "32", "cpu.max": "150000 100000"}},
		{"v2 without swap accounting", hierarchy{v2: true, controllers: []string{"memory"}}, map[string]string{
			"memory.max": "67108864"}},
		{"v2 without controllers (hybrid)", hierarchy{v2: true}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dir{path: t.TempDir(), hierarchy: tt.h}
			for f := range tt.want {
				if err := os.WriteFile(filepath.Join(d.path, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.setLimits(limits); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(d.path)
			if len(entries) != len(tt.want) {
				t.Errorf("%d files in the directory, want %d", len(entries), len(tt.want))
			}
			for f, want := range tt.want {
				b, err := os.ReadFile(filepath.Join(d.path, f))
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != want {
					t.Errorf("%s = %q, want %q", f, b, want)
				}
			}
		})
	}
}

// TestPrepareParents checks, on stand-in directories, that on v2 the
// controllers are enabled from the root down to the group's parent.
func TestPrepareParents(t *testing.T) {
	tests := []struct {
		name  string
		h     hierarchy
		group string
		want  []string // directories, relative to the root, whose subtree_control is written
	}{
		{"v2 top level", hierarchy{v2: true, controllers: []string{"memory", "pids"}}, "x", []string{"."}},
		{"v2 nested", hierarchy{v2: true, controllers: []string{"memory", "pids", "cpu"}}, "mcpbox/a/x", []string{".", "mcpbox", "mcpbox/a"}},
		{"v2 without controllers", hierarchy{v2: true}, "mcpbox/x", nil},
		{"v1", hierarchy{controllers: []string{"memory"}}, "mcpbox/x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.h.root = t.TempDir()
			// cgroupfs makes cgroup.subtree_control in every directory; here
			// the test does, for the root and the parents.
			for _, rel := range []string{".", "mcpbox", "mcpbox/a"} {
				os.MkdirAll(filepath.Join(tt.h.root, rel), 0o755)
				os.WriteFile(filepath.Join(tt.h.root, rel, "cgroup.subtree_control"), nil, 0o644)
			}
			if err := prepareParents(tt.h, tt.group); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(tt.h.root, filepath.Dir(tt.group))); err != nil {
				t.Errorf("parent not created: %v", err)
			}
			wantContent := ""
			if len(tt.h.controllers) > 0 {
				wantContent = "+" + strings.Join(tt.h.controllers, " +")
			}
			for _, rel := range []string{".", "mcpbox", "mcpbox/a"} {
				b, _ := os.ReadFile(filepath.Join(tt.h.root, rel, "cgroup.subtree_control"))
				want := ""
				for _, w := range tt.want {
					if w == rel {
						want = wantContent
					}
				}
				if string(b) != want {
					t.Errorf("%s/cgroup.subtree_control = %q, want %q", rel, b, want)
				}
			}
		})
	}
}
