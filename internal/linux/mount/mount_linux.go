// Package mount wraps mount(2) for building a sandbox's root: errors that
// name what was being mounted where, and read-only binds that work inside
// a user namespace.
package mount

import (
	"fmt"

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
