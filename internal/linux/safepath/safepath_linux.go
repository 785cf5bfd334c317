package safepath

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openat2 is unix.Openat2; tests replace it to exercise the walk older
// kernels take.
var openat2 = unix.Openat2

// OpenDir opens rel, a relative path, beneath the directory root and
// returns an O_PATH descriptor of it. No component may be a symbolic
// link (magic /proc links included), the path may not leave root, and
// the result must be a directory. Mount points on the way are crossed.
func OpenDir(root *os.File, rel string) (*os.File, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		rel = "."
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := openat2(int(root.Fd()), rel, &how)
	if errors.Is(err, unix.ENOSYS) {
		return walk(root, parts, false, 0)
	}
	if err != nil {
		return nil, explain(int(root.Fd()), rel, err, ErrOutside)
	}
	return os.NewFile(uintptr(fd), root.Name()+"/"+rel), nil
}

// MkdirAll makes the missing directories of rel beneath root with mode
// (before umask) and returns an O_PATH descriptor of the last. No
// component may be a symbolic link or a mount point: what it makes is
// made in root's own file system, never through a link or on something
// mounted beneath it.
func MkdirAll(root *os.File, rel string, mode uint32) (*os.File, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, err
	}
	return walk(root, parts, true, mode)
}

// walk opens parts one at a time from root, making the missing ones when
// create is set (and then refusing to cross a mount point).
func walk(root *os.File, parts []string, create bool, mode uint32) (*os.File, error) {
	dir, err := unix.Openat(int(root.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	name := root.Name()
	for _, p := range parts {
		next, err := openComponent(dir, p, create)
		if errors.Is(err, unix.ENOENT) && create {
			if err := unix.Mkdirat(dir, p, mode); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(dir)
				return nil, fmt.Errorf("mkdir %s/%s: %w", name, p, err)
			}
			next, err = openComponent(dir, p, create)
		}
		if err != nil {
			err = explain(dir, p, err, ErrMountCrossing)
			unix.Close(dir)
			return nil, fmt.Errorf("%s/%s: %w", name, p, err)
		}
		unix.Close(dir)
		dir, name = next, name+"/"+p
	}
	return os.NewFile(uintptr(dir), name), nil
}

// openComponent opens one name in dir as an O_PATH directory without
// following it, and without crossing a mount point when sameMount is set.
func openComponent(dir int, name string, sameMount bool) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	if sameMount {
		how.Resolve |= unix.RESOLVE_NO_XDEV
	}
	fd, err := openat2(dir, name, &how)
	if !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	// Before openat2: O_NOFOLLOW opens a link itself, which O_DIRECTORY
	// then refuses (explain tells a link from a file); a mount point shows
	// as a change of mount id.
	fd, err = unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil || !sameMount {
		return fd, err
	}
	parent, err1 := mountID(dir)
	child, err2 := mountID(fd)
	if err := errors.Join(err1, err2); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if parent != child {
		unix.Close(fd)
		return -1, unix.EXDEV
	}
	return fd, nil
}

// explain turns what openat2 or the walk said about name in dir into the
// package's errors; EXDEV means xdev (openat2 says it both for a way out
// of the root and, with RESOLVE_NO_XDEV, for a mount point).
func explain(dir int, name string, err, xdev error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return ErrSymlink
	case errors.Is(err, unix.EXDEV):
		return xdev
	case errors.Is(err, unix.ENOTDIR):
		// A link opened with O_NOFOLLOW fails as "not a directory". Look.
		if isSymlinkOnTheWay(dir, name) {
			return ErrSymlink
		}
	}
	return err
}

// isSymlinkOnTheWay reports whether a component of name, looked up from
// dir without following links, is a symbolic link.
func isSymlinkOnTheWay(dir int, name string) bool {
	parts := strings.Split(name, "/")
	for i := range parts {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, strings.Join(parts[:i+1], "/"), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return false
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return true
		}
	}
	return false
}

// mountID reads the id of the mount fd lies on from /proc/self/fdinfo,
// which has it since Linux 3.15.
func mountID(fd int) (string, error) {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mnt_id:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New("no mnt_id in fdinfo")
}
