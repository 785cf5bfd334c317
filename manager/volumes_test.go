package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

func TestVolumesAllowList(t *testing.T) {
	base := t.TempDir()
	allowed := filepath.Join(base, "allowed")
	outside := filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(allowed, "data"), 0o755)
	os.MkdirAll(outside, 0o755)
	os.Symlink(outside, filepath.Join(allowed, "sneaky"))
	ctx := context.Background()
	m, _, _ := newManager(t, manager.Options{VolumeRoots: []string{allowed}})
	for _, tc := range []struct {
		name string
		vol  string
		ok   bool
	}{
		{"under a root", allowed + "/data:/mnt/data:ro", true},
		{"the root itself", allowed + ":/mnt/all", true},
		{"outside", outside + ":/mnt/x", false},
		{"symlink out of a root", allowed + "/sneaky:/mnt/x", false},
		{"dot dot", allowed + "/../outside:/mnt/x", false},
		{"over /usr", allowed + "/data:/usr/lib", false},
		{"relative", "data:/mnt/x", false},
		{"bad mode", allowed + "/data:/mnt/x:rx", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := mcpbox.ParseVolume(tc.vol)
			if err == nil {
				_, err = m.Create(ctx, "alice", manager.CreateRequest{Volumes: []mcpbox.Volume{v}})
			}
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && mcpbox.ErrorCode(err) != mcpbox.EINVALID {
				t.Errorf("code %s, want %s", mcpbox.ErrorCode(err), mcpbox.EINVALID)
			}
		})
	}
	list, _ := m.List(ctx, "alice", mcpbox.SessionFilter{})
	found := false
	for _, s := range list {
		vols, err := m.Volumes(ctx, "alice", s.ID)
		if err != nil || len(vols) != 1 {
			t.Errorf("Volumes(%s) = %v, %v", s.ID, vols, err)
		}
		found = found || (vols[0].SandboxPath == "/mnt/data" && vols[0].ReadOnly)
	}
	if !found {
		t.Error("no session reports the read-only /mnt/data volume")
	}
	if _, err := m.Volumes(ctx, "bob", list[0].ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("another owner's volumes: %v", err)
	}
	if _, err := manager.New(ctx, &manager.Options{Runtime: nil}); err == nil {
		t.Error("New without a runtime accepted")
	}
}
