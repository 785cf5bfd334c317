package safepath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes a root with real directories and links of every kind, and a
// directory outside it the links lead to.
func tree(t *testing.T) (root *os.File, rootPath, outside string) {
	t.Helper()
	base := t.TempDir()
	rootPath, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(rootPath, "real", "sub"), filepath.Join(outside, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{"abs": outside, "rel": "../outside", "mid": outside, "inside": "real", "proc": "/proc/self/root"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(rootPath, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootPath, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(rootPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root, rootPath, outside
}

// bothWalks runs f with openat2 and with the walk kernels before 5.6 take.
func bothWalks(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", f)
	t.Run("without openat2", func(t *testing.T) {
		openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
		defer func() { openat2 = unix.Openat2 }()
		f(t)
	})
}

// errAny stands for any error in a table.
var errAny = errors.New("any error")

func TestOpenDir(t *testing.T) {
	bothWalks(t, func(t *testing.T) {
		root, rootPath, _ := tree(t)
		for _, tc := range []struct {
			rel  string
			want error // nil: opens, and is the directory of that name
		}{
			{".", nil},
			{"real", nil},
			{"real/sub", nil},
			{"abs", ErrSymlink},
			{"rel", ErrSymlink},
			{"mid/sub", ErrSymlink},
			{"inside", ErrSymlink},
			{"proc", ErrSymlink},
			{"file", unix.ENOTDIR},
			{"missing", unix.ENOENT},
			{"../outside", ErrOutside},
			{"real/../../outside", errAny},
			{"/real", errAny},
		} {
			t.Run(tc.rel, func(t *testing.T) {
				f, err := OpenDir(root, tc.rel)
				if tc.want == nil {
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					sameFile(t, f, filepath.Join(rootPath, tc.rel))
					return
				}
				if err == nil {
					f.Close()
					t.Fatalf("opened %q, want %v", tc.rel, tc.want)
				}
				if tc.want != errAny && !errors.Is(err, tc.want) {
					t.Errorf("err = %v, want %v", err, tc.want)
				}
			})
		}
	})
}

func TestMkdirAll(t *testing.T) {
	bothWalks(t, func(t *testing.T) {
		root, rootPath, outside := tree(t)
		for _, rel := range []string{"new/a/b", "real/sub/x", "real"} {
			f, err := MkdirAll(root, rel, 0o755)
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			sameFile(t, f, filepath.Join(rootPath, rel))
			f.Close()
		}
		for _, rel := range []string{"mid/x", "abs/x", "rel/x", "inside/x", "abs"} {
			f, err := MkdirAll(root, rel, 0o755)
			if !errors.Is(err, ErrSymlink) {
				f.Close()
				t.Errorf("%s: err = %v, want %v", rel, err, ErrSymlink)
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(outside)); len(ents) != 1 {
			t.Errorf("something was made outside the root: %v", ents)
		}
	})
}

// TestMkdirAllMountPoint mounts a tmpfs beneath the root: MkdirAll must
// not make directories on it.
func TestMkdirAllMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount; CI runs it as root")
	}
	bothWalks(t, func(t *testing.T) {
		root, rootPath, _ := tree(t)
		mnt := filepath.Join(rootPath, "real", "mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(mnt, unix.MNT_DETACH)
		if f, err := MkdirAll(root, "real/mnt/x", 0o755); !errors.Is(err, ErrMountCrossing) {
			f.Close()
			t.Errorf("err = %v, want %v", err, ErrMountCrossing)
		}
		if _, err := os.Stat(filepath.Join(mnt, "x")); err == nil {
			t.Error("a directory was made on the mounted file system")
		}
		// OpenDir crosses mount points: volumes may lie on other mounts.
		f, err := OpenDir(root, "real/mnt")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
}

func sameFile(t *testing.T, f *os.File, path string) {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(path, &b); err != nil {
		t.Fatal(err)
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		t.Errorf("descriptor is not %s", path)
	}
}

func TestRel(t *testing.T) {
	for _, tc := range []struct{ root, path, want string }{
		{"/srv", "/srv", "."},
		{"/srv", "/srv/a/b", "a/b"},
		{"/", "/srv/a", "srv/a"},
		{"/srv", "/srvx", ""},
		{"/srv", "/etc", ""},
		{"/srv/", "/srv/a", ""},
		{"srv", "srv/a", ""},
	} {
		got, err := Rel(tc.root, tc.path)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("Rel(%q, %q) = %q, %v; want %q", tc.root, tc.path, got, err, tc.want)
		}
	}
}
