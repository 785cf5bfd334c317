// Package mount wraps mount(2) for building a sandbox's root: errors that
// name what was being mounted where, and read-only binds that work inside
// a user namespace.
package mount

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Mount is mount(2) with an error that names the mount, such as
// "mount tmpfs on /x: operation not permitted".
func Mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype+source, target, err)
	}
	return nil
}

// MakePrivate stops mount events propagating between path's subtree and
// the mount namespace it was copied from, both ways.
func MakePrivate(path string) error {
	return Mount("", path, "", unix.MS_REC|unix.MS_PRIVATE, "")
}

// BindReadOnly binds src on dst, with everything mounted beneath src, and
// makes dst read-only. Inside a user namespace the remount must keep the
// flags the kernel locked on the source mount (nosuid, nodev, noexec,
// atime), or it fails with EPERM.
func BindReadOnly(src, dst string) error {
	if err := Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dst, err)
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID) | lockedFlags(st.Flags)
	return Mount("", dst, "", flags, "")
}

// mountSetattr is unix.MountSetattr; tests replace it to take the way
// Linux 5.11 goes.
var mountSetattr = unix.MountSetattr

// BindFD binds the directory src is open on, with everything mounted
// beneath it, onto the directory dst is open on: no name is looked up, so
// nothing renamed or linked since the two were opened changes what is
// bound where. With readOnly every mount of the copy is read-only, not
// only its top. The copy is nosuid and nodev either way. src and dst may
// be O_PATH descriptors, and must be in this mount namespace.
func BindFD(src, dst *os.File, readOnly bool) error {
	tree, err := Clone(src, "", readOnly)
	if err != nil {
		return err
	}
	defer tree.Close()
	return Attach(tree, dst, readOnly)
}

// Clone returns a detached copy of the mount tree at path beneath dir
// (dir itself when path is ""; nil dir: path is resolved as usual):
// open_tree with OPEN_TREE_CLONE, nosuid and nodev, read-only with every
// submount when asked and the kernel has mount_setattr (Linux 5.12+;
// Attach finishes the job on older ones). The source must be in this
// mount namespace. The copy may be attached in another one, even one of
// another user namespace: the host hands a sandbox's PID 1 what it may
// see this way, since a descriptor of a host directory cannot be a bind
// source there (it belongs to the host's mount namespace).
func Clone(dir *os.File, path string, readOnly bool) (*os.File, error) {
	dirfd, name, flags := unix.AT_FDCWD, path, uint(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if dir != nil {
		dirfd, name = int(dir.Fd()), dir.Name()
		if path != "" {
			name += "/" + path
		} else {
			flags |= unix.AT_EMPTY_PATH
		}
	}
	fd, err := unix.OpenTree(dirfd, path, flags)
	if err != nil {
		return nil, fmt.Errorf("open_tree %s: %w", name, err)
	}
	tree := os.NewFile(uintptr(fd), name)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := mountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil && !errors.Is(err, unix.ENOSYS) {
		tree.Close()
		return nil, fmt.Errorf("mount_setattr %s: %w", name, err)
	}
	return tree, nil
}

// Attach mounts the detached tree (from Clone, or Tmpfs) on the directory
// dst is open on. With readOnly, a top the kernel could not make
// read-only before (Linux 5.11 has no mount_setattr) is remounted so;
// its submounts stay as they were.
func Attach(tree, dst *os.File, readOnly bool) error {
	if err := unix.MoveMount(int(tree.Fd()), "", int(dst.Fd()), "",
		unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s to %s: %w", tree.Name(), dst.Name(), err)
	}
	if !readOnly {
		return nil
	}
	// Through the tree's descriptor, now attached: no name is looked up.
	at := "/proc/self/fd/" + strconv.Itoa(int(tree.Fd()))
	var st unix.Statfs_t
	if err := unix.Statfs(at, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dst.Name(), err)
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return nil
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV) | lockedFlags(st.Flags)
	if err := unix.Mount("", at, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", dst.Name(), err)
	}
	return nil
}

// Tmpfs returns a new, detached tmpfs (fsopen, fsmount), nosuid and
// nodev, of at most sizeBytes and inodes, its root directory of mode
// mode: a descriptor of its root, usable before and after Attach puts it
// somewhere. Paths beneath "/proc/self/fd/N" reach into it.
func Tmpfs(sizeBytes, inodes int64, mode os.FileMode) (*os.File, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	for _, o := range [][2]string{
		{"size", strconv.FormatInt(sizeBytes, 10)},
		{"nr_inodes", strconv.FormatInt(inodes, 10)},
		{"mode", strconv.FormatUint(uint64(mode.Perm()), 8)},
	} {
		if err := unix.FsconfigSetString(fs, o[0], o[1]); err != nil {
			return nil, fmt.Errorf("fsconfig tmpfs %s=%s: %w", o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("fsconfig tmpfs create: %w", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return os.NewFile(uintptr(fd), "tmpfs"), nil
}

// lockedFlags translates statfs flags to the mount flags a remount must
// repeat.
func lockedFlags(f int64) uintptr {
	var out uintptr
	for st, ms := range map[int64]uintptr{
		unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME,
		unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if f&st != 0 {
			out |= ms
		}
	}
	return out
}
