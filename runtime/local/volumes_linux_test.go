package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

func TestVolumes(t *testing.T) {
	rt := newRuntime(t)
	base := volumeBase(t)
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	os.Mkdir(ro, 0o755)
	os.Mkdir(rw, 0o777)
	os.WriteFile(filepath.Join(ro, "input.txt"), []byte("from the host"), 0o644)
	// The sandbox's user is host uid 101000: the operator owns what it may write.
	os.Chown(rw, 100000+1000, 100000+1000)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny, Volumes: []mcpbox.Volume{
		{Root: base, HostPath: ro, SandboxPath: "/mnt/in", ReadOnly: true},
		// A record from before volumes had a root: opened from / with no
		// link allowed anywhere on the way.
		{HostPath: rw, SandboxPath: "/mnt/out"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Destroy(context.Background(), sb.ID)
	c := agentclient.ForSandbox(rt, sb.ID)
	defer c.Close()
	out, _ := mustSh(t, c, "cat /mnt/in/input.txt; echo; echo x > /mnt/in/new 2>&1; echo result > /mnt/out/result.txt && echo wrote")
	if !strings.Contains(out, "from the host") || !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "wrote") {
		t.Errorf("volume behaviour:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "result.txt")); err != nil || string(b) != "result\n" {
		t.Errorf("read-write volume: host sees %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Error("write through a read-only volume reached the host")
	}
	if _, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny, Volumes: []mcpbox.Volume{{HostPath: ro, SandboxPath: "/proc/x"}}}); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("volume over /proc: %v", err)
	}
}

// volumeBase is a host directory the sandbox's mapped uid may walk
// through, as an operator's volume roots are.
func volumeBase(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "mcpbox-vol-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestVolumeSymlinkSwap gives the runtime what the manager checked by name
// with a symlink swapped in afterwards: a volume whose host path leads,
// through a link, to a directory outside its allowed root. Creation must
// fail, saying why, and the outside directory must not be bound.
func TestVolumeSymlinkSwap(t *testing.T) {
	rt := newRuntime(t)
	base := volumeBase(t)
	root, secret := filepath.Join(base, "allowed"), filepath.Join(base, "secret")
	for _, d := range []string{root, filepath.Join(root, "real"), secret, filepath.Join(secret, "sub")} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	marker := "secret" + testutil.ID()
	os.WriteFile(filepath.Join(secret, marker), []byte(marker), 0o644)
	os.Symlink(secret, filepath.Join(root, "abs"))      // the last component, absolute
	os.Symlink("../secret", filepath.Join(root, "rel")) // the last component, relative
	os.Symlink(secret, filepath.Join(root, "mid"))      // a middle component
	os.Symlink("real", filepath.Join(root, "inside"))   // a link that stays beneath the root
	for _, tc := range []struct {
		name string
		vol  mcpbox.Volume
		want string // in the error
	}{
		{"last component absolute", mcpbox.Volume{Root: root, HostPath: filepath.Join(root, "abs"), SandboxPath: "/mnt/v"}, "symbolic link"},
		{"last component relative", mcpbox.Volume{Root: root, HostPath: filepath.Join(root, "rel"), SandboxPath: "/mnt/v"}, "symbolic link"},
		{"middle component", mcpbox.Volume{Root: root, HostPath: filepath.Join(root, "mid", "sub"), SandboxPath: "/mnt/v"}, "symbolic link"},
		{"link beneath the root", mcpbox.Volume{Root: root, HostPath: filepath.Join(root, "inside"), SandboxPath: "/mnt/v"}, "symbolic link"},
		{"read-only", mcpbox.Volume{Root: root, HostPath: filepath.Join(root, "abs"), SandboxPath: "/mnt/v", ReadOnly: true}, "symbolic link"},
		{"no root, link on the way", mcpbox.Volume{HostPath: filepath.Join(root, "mid", "sub"), SandboxPath: "/mnt/v"}, "symbolic link"},
		{"outside its root", mcpbox.Volume{Root: root, HostPath: secret, SandboxPath: "/mnt/v"}, "not beneath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id := testutil.ID()
			sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: tiny, Volumes: []mcpbox.Volume{tc.vol}})
			if err == nil {
				defer rt.Destroy(context.Background(), sb.ID)
				c := agentclient.ForSandbox(rt, sb.ID)
				defer c.Close()
				out, _ := mustSh(t, c, "ls -la /mnt/v /mnt/v/ 2>&1")
				t.Fatalf("volume %s was bound; the sandbox sees:\n%s", tc.vol, out)
			}
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "volume") {
				t.Errorf("error = %v, want it to name the volume and say %q", err, tc.want)
			}
		})
	}
}

// TestVolumeSandboxPathSymlink plants a link in one volume's host
// directory where a second volume's mount point must be made: following
// it would make a directory on the host, outside every volume.
func TestVolumeSandboxPathSymlink(t *testing.T) {
	rt := newRuntime(t)
	base := volumeBase(t)
	outer, inner, target := filepath.Join(base, "outer"), filepath.Join(base, "inner"), filepath.Join(base, "target")
	for _, d := range []string{outer, inner, target} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	// A sandbox that had outer writable left this behind.
	if err := os.Symlink(target, filepath.Join(outer, "b")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny, Volumes: []mcpbox.Volume{
		{Root: base, HostPath: outer, SandboxPath: "/mnt/a"},
		{Root: base, HostPath: inner, SandboxPath: "/mnt/a/b/evil"},
	}})
	if err == nil {
		rt.Destroy(context.Background(), sb.ID)
		t.Errorf("a volume mounted through a link planted in another volume was accepted")
	}
	if _, err := os.Stat(filepath.Join(target, "evil")); err == nil {
		t.Errorf("creating the sandbox made %s on the host", filepath.Join(target, "evil"))
	}
}

// TestVolumeReadOnlySubmount mounts a file system inside a read-only
// volume's host directory: the sandbox must not be able to write there
// either.
func TestVolumeReadOnlySubmount(t *testing.T) {
	rt := newRuntime(t)
	base := volumeBase(t)
	os.Chmod(base, 0o777) // only the volume's read-only flag stands in the way
	sub := filepath.Join(base, "sub")
	if err := os.Mkdir(sub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m,mode=0777"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(sub, unix.MNT_DETACH) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny, Volumes: []mcpbox.Volume{
		{Root: base, HostPath: base, SandboxPath: "/mnt/in", ReadOnly: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Destroy(context.Background(), sb.ID)
	c := agentclient.ForSandbox(rt, sb.ID)
	defer c.Close()
	out, _ := mustSh(t, c, "echo x > /mnt/in/sub/new 2>&1; echo x > /mnt/in/new 2>&1; true")
	if strings.Count(out, "Read-only file system") != 2 {
		t.Errorf("writes into a read-only volume:\n%s", out)
	}
	for _, p := range []string{filepath.Join(sub, "new"), filepath.Join(base, "new")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a read-only volume let the sandbox write %s", p)
		}
	}
}
