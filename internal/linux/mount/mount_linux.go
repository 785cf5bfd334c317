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
// be O_PATH descriptors.
func BindFD(src, dst *os.File, readOnly bool) error {
	tree, err := unix.OpenTree(int(src.Fd()), "",
		unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src.Name(), err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	setattr := mountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
	if setattr != nil && !errors.Is(setattr, unix.ENOSYS) {
		return fmt.Errorf("mount_setattr %s: %w", src.Name(), setattr)
	}
	if err := unix.MoveMount(tree, "", int(dst.Fd()), "",
		unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s to %s: %w", src.Name(), dst.Name(), err)
	}
	if setattr == nil || !readOnly {
		return nil
	}
	// Linux 5.11 has no mount_setattr: remount the top of the copy, now
	// attached, through its descriptor (its submounts stay as they were).
	at := "/proc/self/fd/" + strconv.Itoa(tree)
	var st unix.Statfs_t
	if err := unix.Statfs(at, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dst.Name(), err)
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV) | lockedFlags(st.Flags)
	if err := unix.Mount("", at, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", dst.Name(), err)
	}
	return nil
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
