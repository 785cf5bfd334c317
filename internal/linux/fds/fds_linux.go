// Package fds keeps file descriptors from crossing exec where nobody
// meant them to.
//
// Go opens every descriptor close-on-exec, but a process also starts with
// whatever its parent left open without that flag: a shell's redirections,
// a service manager's sockets, a test harness's pipes. Such a descriptor
// survives every exec that follows, into a sandbox's PID 1 and from there
// into user code, where a directory descriptor is a way out of the
// sandbox's root (/proc/self/fd/N/... resolves on the host).
//
// The host calls [CloseOnExec] first thing in main, so nothing it
// inherited reaches what it executes; a sandbox's PID 1 calls
// [CloseInherited] first thing, so it holds only what it was handed.
package fds

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExec marks every open descriptor numbered from and above
// close-on-exec. The process keeps using them; exec no longer passes them
// on. Descriptors the Go runtime opened already carry the flag.
func CloseOnExec(from int) error {
	err := unix.CloseRange(uint(from), math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("close_range: %w", err)
	}
	// Before Linux 5.11 there is no CLOSE_RANGE_CLOEXEC: one fcntl each.
	open, err := List()
	if err != nil {
		return err
	}
	for _, fd := range open {
		if fd < from {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("mark fd %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

// CloseInherited closes every descriptor numbered from and above that
// this process inherited through exec, and returns their numbers.
//
// Exec closes every descriptor marked close-on-exec, and Go marks every
// descriptor it opens, so after exec a descriptor without the mark is one
// that came from the parent, and one with it was opened here (by the Go
// runtime, say: its poller). Only the former are closed. Call it before
// anything in this process opens a descriptor without the mark.
func CloseInherited(from int) ([]int, error) {
	open, err := List()
	if err != nil {
		return nil, err
	}
	var closed []int
	for _, fd := range open {
		if fd < from {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			if errors.Is(err, unix.EBADF) {
				continue // the directory List read, closed since
			}
			return closed, fmt.Errorf("fcntl fd %d: %w", fd, err)
		}
		if flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if err := unix.Close(fd); err != nil {
			return closed, fmt.Errorf("close inherited fd %d: %w", fd, err)
		}
		closed = append(closed, fd)
	}
	return closed, nil
}

// List returns the numbers of this process's open descriptors, read from
// /proc/self/fd. The descriptor it reads through is in the list but
// closed by the time List returns.
func List() ([]int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("list open descriptors: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list open descriptors: %w", err)
	}
	fds := make([]int, 0, len(names))
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		fds = append(fds, fd)
	}
	return fds, nil
}
