package mount

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// inMountNS runs f on a thread of its own in a new mount namespace, which
// ends with the thread: nothing f mounts reaches the host's mount table.
func inMountNS(t *testing.T, f func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount; CI runs it as root")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := MakePrivate("/"); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestBindFD(t *testing.T) {
	for _, tc := range []struct {
		name      string
		readOnly  bool
		noSetattr bool // Linux 5.11: no mount_setattr
		wantTop   error
		wantSub   error
	}{
		{"read-write", false, false, nil, nil},
		{"read-only", true, false, unix.EROFS, unix.EROFS},
		{"read-only without mount_setattr", true, true, unix.EROFS, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noSetattr {
				mountSetattr = func(int, string, uint, *unix.MountAttr) error { return unix.ENOSYS }
				defer func() { mountSetattr = unix.MountSetattr }()
			}
			base := t.TempDir()
			src, dst := filepath.Join(base, "src"), filepath.Join(base, "dst")
			for _, d := range []string{src, dst, filepath.Join(src, "sub")} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			inMountNS(t, func() error {
				if err := Mount("tmpfs", filepath.Join(src, "sub"), "tmpfs", 0, "size=64k"); err != nil {
					return err
				}
				s, err := os.OpenFile(src, unix.O_PATH|unix.O_DIRECTORY, 0)
				if err != nil {
					return err
				}
				defer s.Close()
				d, err := os.OpenFile(dst, unix.O_PATH|unix.O_DIRECTORY, 0)
				if err != nil {
					return err
				}
				defer d.Close()
				if err := BindFD(s, d, tc.readOnly); err != nil {
					return err
				}
				for _, c := range []struct {
					path string
					want error
				}{{filepath.Join(dst, "x"), tc.wantTop}, {filepath.Join(dst, "sub", "x"), tc.wantSub}} {
					err := os.WriteFile(c.path, nil, 0o644)
					if !errors.Is(err, c.want) && (c.want != nil || err != nil) {
						t.Errorf("write %s: %v, want %v", c.path, err, c.want)
					}
				}
				if !tc.noSetattr {
					var st unix.Statfs_t
					if err := unix.Statfs(dst, &st); err != nil {
						return err
					}
					if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
						t.Errorf("the bind is not nosuid,nodev: flags %#x", st.Flags)
					}
				}
				return nil
			})
		})
	}
}

// TestCloneAttachElsewhere clones a tree in this mount namespace and
// attaches it in another, as the host hands a sandbox its kernel drivers:
// the copy is read-only there, and what it covers is the source's.
func TestCloneAttachElsewhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount; CI runs it as root")
	}
	base := t.TempDir()
	src, dst := filepath.Join(base, "src"), filepath.Join(base, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("from src"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree, err := Clone(nil, src, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	inMountNS(t, func() error {
		d, err := os.OpenFile(dst, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := Attach(tree, d, true); err != nil {
			return err
		}
		if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "from src" {
			t.Errorf("read through the copy: %q, %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(dst, "g"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("write through the copy: %v, want EROFS", err)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dst, "f")); err == nil {
		t.Error("the copy reached this mount namespace")
	}
}

func TestTmpfs(t *testing.T) {
	base := t.TempDir()
	inMountNS(t, func() error {
		fs, err := Tmpfs(64<<10, 16, 0o750)
		if err != nil {
			return err
		}
		defer fs.Close()
		d, err := os.OpenFile(base, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := Attach(fs, d, false); err != nil {
			return err
		}
		if fi, err := os.Stat(base); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("tmpfs root: %v, %v; want mode 0750", fi.Mode(), err)
		}
		err = os.WriteFile(filepath.Join(base, "big"), make([]byte, 128<<10), 0o644)
		if !errors.Is(err, unix.ENOSPC) {
			t.Errorf("writing past the size: %v, want ENOSPC", err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(base, &st); err != nil {
			return err
		}
		if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
			t.Errorf("the tmpfs is not nosuid,nodev: flags %#x", st.Flags)
		}
		return nil
	})
}
