package template

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// OCI whiteouts (image-spec layer.md) and their overlayfs form: a 0/0
// character device hides a name of the layers below, an xattr makes a
// directory opaque. The user.* namespace is the one an overlay mounted in
// a user namespace reads (the "userxattr" option).
const (
	whPrefix      = ".wh."
	whOpaque      = ".wh..wh..opq"
	xattrOpaque   = "user.overlay.opaque"
	xattrWhiteout = "user.overlay.whiteout"
	// trusted.* is what an overlay mounted by the host's root writes; a
	// commit reads either.
	xattrOpaqueTrusted = "trusted.overlay.opaque"
)

// applyStats is what applying one layer did.
type applyStats struct {
	bytes   int64 // file contents written
	skipped []string
}

// applier extracts one layer's tar stream into dir.
type applier struct {
	s      *Store
	dir    string
	lowers []string // the layers below, top first: hard links may point into them
	budget *int64   // bytes the image may still unpack to
	stats  applyStats
	dirs   []dirTime // directory times, set last (entries inside change them)
}

type dirTime struct {
	path string
	t    time.Time
}

// apply reads the uncompressed tar stream r into a.dir.
func (a *applier) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := a.entry(tr, hdr); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	for i := len(a.dirs) - 1; i >= 0; i-- {
		setTimes(a.dirs[i].path, a.dirs[i].t)
	}
	return nil
}

func (a *applier) charge(n int64) error {
	*a.budget -= n
	if *a.budget < 0 {
		return fmt.Errorf("the image unpacks to more than %d MiB, the limit", a.s.maxBytes>>20)
	}
	return nil
}

func (a *applier) entry(tr *tar.Reader, hdr *tar.Header) error {
	if err := a.charge(512); err != nil {
		return err
	}
	// Cleaned as if rooted: "../../etc/passwd" is /etc/passwd of the
	// layer, never a file beside it.
	rel := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock:
		// A sandbox cannot use a device of its image (it has its own
		// /dev), and a 0/0 one here would forge a whiteout.
		a.stats.skipped = append(a.stats.skipped, rel)
		return nil
	}
	if rel == "" {
		return nil // the layer's root: its attributes are the sandbox's
	}
	parentRel, base := path.Split(rel)
	parent, err := a.mkdirs(parentRel)
	if err != nil {
		return err
	}
	if base == whOpaque {
		return setOpaque(parent)
	}
	if name, ok := strings.CutPrefix(base, whPrefix); ok {
		if name == "" || name == "." || name == ".." {
			return errors.New("invalid whiteout")
		}
		p := filepath.Join(parent, name)
		if err := removeAll(p); err != nil {
			return err
		}
		return a.whiteout(parent, p)
	}
	p := filepath.Join(parent, base)
	if fi, err := os.Lstat(p); err == nil {
		if fi.IsDir() && hdr.Typeflag == tar.TypeDir {
			return a.attrs(p, hdr) // a directory seen again: new attributes
		}
		if err := removeAll(p); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		if err := a.charge(hdr.Size); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		a.stats.bytes += n
	case tar.TypeSymlink:
		// Kept as written, absolute or not: inside the sandbox it resolves
		// in the sandbox's root, and nothing here follows it.
		if err := os.Symlink(hdr.Linkname, p); err != nil {
			return err
		}
		return a.owner(p, hdr)
	case tar.TypeLink:
		return a.link(p, hdr)
	case tar.TypeFifo:
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return err
		}
	default:
		a.stats.skipped = append(a.stats.skipped, rel)
		return nil
	}
	return a.attrs(p, hdr)
}

// mkdirs returns the layer directory rel names, creating what is missing.
// Symlinks met on the way resolve inside the layer, as they would in the
// sandbox: a layer's "etc -> /host" link followed by "etc/passwd" writes
// the layer's own file.
func (a *applier) mkdirs(rel string) (string, error) {
	p, err := securejoin.SecureJoinVFS(a.dir, rel, mergedVFS{a})
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(p)
	if err == nil {
		if !fi.IsDir() {
			return "", fmt.Errorf("%s is not a directory", rel)
		}
		return p, nil
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", err
	}
	if !a.s.rootless {
		// Implicit directories are root's, as the sandbox sees it.
		for q := p; q != a.dir && strings.HasPrefix(q, a.dir); q = filepath.Dir(q) {
			os.Lchown(q, a.s.uidBase, a.s.uidBase)
		}
	}
	return p, nil
}

// mergedVFS looks names up as the sandbox will see them: in this layer,
// else in the layers below, so a directory written beneath a lower
// layer's symlink (/lib -> usr/lib) lands where the link leads instead of
// shadowing it. Every name it answers for is one beneath a.dir.
type mergedVFS struct{ a *applier }

func (v mergedVFS) find(name string) (string, os.FileInfo, error) {
	fi, err := os.Lstat(name)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return name, fi, err
	}
	rel, rerr := filepath.Rel(v.a.dir, name)
	if rerr != nil || strings.HasPrefix(rel, "..") {
		return name, nil, err
	}
	for _, l := range v.a.lowers {
		lp := filepath.Join(l, rel)
		lfi, lerr := os.Lstat(lp)
		if lerr != nil {
			continue
		}
		if isWhiteout(lp, lfi) {
			break
		}
		return lp, lfi, nil
	}
	return name, nil, err
}

func (v mergedVFS) Lstat(name string) (os.FileInfo, error) {
	_, fi, err := v.find(name)
	return fi, err
}

func (v mergedVFS) Readlink(name string) (string, error) {
	p, _, err := v.find(name)
	if err != nil {
		return "", err
	}
	return os.Readlink(p)
}

// isWhiteout reports whether the file at p (fi its Lstat) is an overlay
// whiteout, in either form.
func isWhiteout(p string, fi os.FileInfo) bool {
	if fi.Mode()&os.ModeCharDevice != 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
			return true
		}
	}
	if fi.Mode().IsRegular() && fi.Size() == 0 {
		if _, err := unix.Lgetxattr(p, xattrWhiteout, nil); err == nil {
			return true
		}
	}
	return false
}

// link makes p a hard link to the file hdr.Linkname names: in this layer,
// or, copied, in a layer below.
func (a *applier) link(p string, hdr *tar.Header) error {
	rel := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
	dir, base := path.Split(rel)
	if rel == "" {
		return errors.New("hard link to the root")
	}
	for i, root := range append([]string{a.dir}, a.lowers...) {
		d, err := securejoin.SecureJoin(root, dir)
		if err != nil {
			return err
		}
		target := filepath.Join(d, base)
		fi, err := os.Lstat(target)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			return fmt.Errorf("hard link to directory %s", hdr.Linkname)
		}
		if i == 0 {
			return os.Link(target, p) // link(2) does not follow a symlink
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("hard link to %s in a lower layer, which is not a regular file", hdr.Linkname)
		}
		if err := a.charge(fi.Size()); err != nil {
			return err
		}
		if err := copyFile(target, p); err != nil {
			return err
		}
		return a.attrs(p, hdr)
	}
	return fmt.Errorf("hard link to %s, which no layer has", hdr.Linkname)
}

func copyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// attrs gives p its owner, mode (less setuid and setgid) and times.
func (a *applier) attrs(p string, hdr *tar.Header) error {
	if err := a.owner(p, hdr); err != nil {
		return err
	}
	mode := os.FileMode(hdr.Mode).Perm()
	if hdr.Mode&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	if err := os.Chmod(p, mode); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeDir {
		a.dirs = append(a.dirs, dirTime{p, hdr.ModTime})
		return nil
	}
	// Python trusts a .pyc whose source's mtime it recorded: times kept,
	// an image's bytecode stays valid.
	setTimes(p, hdr.ModTime)
	return nil
}

func (a *applier) owner(p string, hdr *tar.Header) error {
	if a.s.rootless {
		return nil // one uid: everything is the sandbox's root
	}
	return os.Lchown(p, a.s.mapID(hdr.Uid), a.s.mapID(hdr.Gid))
}

// mapID is the host id of id inside a sandbox; ids past the 65536 a
// sandbox maps are nobody's.
func (s *Store) mapID(id int) int {
	if id < 0 || id >= 65536 {
		id = 65534
	}
	return s.uidBase + id
}

// unmapID is mapID's inverse, for files read back (commit, export).
func (s *Store) unmapID(id int) int {
	if s.rootless {
		return 0
	}
	if id < s.uidBase || id >= s.uidBase+65536 {
		return 65534
	}
	return id - s.uidBase
}

func setTimes(p string, t time.Time) {
	if t.IsZero() {
		return
	}
	ts := unix.NsecToTimespec(t.UnixNano())
	unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

func setOpaque(dir string) error {
	if err := unix.Lsetxattr(dir, xattrOpaque, []byte("y"), 0); err != nil {
		return fmt.Errorf("mark %s opaque: %w", filepath.Base(dir), err)
	}
	return nil
}

// whiteout hides p's name in the layers below: a 0/0 character device, or
// without the right to make one (rootless) the xattr form overlayfs reads
// since Linux 6.7.
func (a *applier) whiteout(parent, p string) error {
	err := unix.Mknod(p, unix.S_IFCHR|0o600, 0)
	if err == nil {
		if !a.s.rootless {
			os.Lchown(p, a.s.uidBase, a.s.uidBase)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("whiteout: %w", err)
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	if err := unix.Lsetxattr(p, xattrWhiteout, nil, 0); err != nil {
		return fmt.Errorf("whiteout xattr: %w", err)
	}
	// The parent says it holds xattr whiteouts ("x"), unless it is opaque
	// already ("y" says more).
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(parent, xattrOpaque, buf); err == nil && n == 1 && buf[0] == 'y' {
		return nil
	}
	return unix.Lsetxattr(parent, xattrOpaque, []byte("x"), 0)
}
