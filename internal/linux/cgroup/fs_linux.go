//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The file helpers call the kernel directly instead of going through
// os.File: a cgroup write is open, write, close, and os.OpenFile adds a
// failing epoll registration and a finalizer to each. Errors are
// *fs.PathError naming the step and the path, behind the "cgroup: " prefix.
//
// Unlike os.File they must retry EINTR themselves. It is common: Go
// preempts goroutines with signals, and a v1 memory limit write fails
// with EINTR whenever a signal is pending as it starts.

// retryEINTR calls f until it fails with something other than EINTR.
func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// writeFile writes data to an existing cgroup file.
func writeFile(path, data string) error {
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return pathError("open", path, err)
	}
	// A cgroup file takes a value in one write, or refuses it whole.
	err = retryEINTR(func() error {
		_, err := unix.Write(fd, []byte(data))
		return err
	})
	unix.Close(fd)
	if err != nil {
		return pathError("write", path, err)
	}
	return nil
}

func writeInt(path string, v int64) error { return writeFile(path, strconv.FormatInt(v, 10)) }

// mkdir creates one cgroup directory.
func mkdir(path string) error {
	if err := retryEINTR(func() error { return unix.Mkdir(path, 0o755) }); err != nil {
		return pathError("mkdir", path, err)
	}
	return nil
}

// rmdir removes one cgroup directory. A cgroup can stay busy for a moment
// after its last process exited, while the kernel releases it, so EBUSY is
// retried for about 300 ms, unless processes are still in it. A directory
// already gone is not an error.
func rmdir(path string) error {
	delay := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := retryEINTR(func() error { return unix.Rmdir(path) })
		switch {
		case err == nil || err == unix.ENOENT:
			return nil
		case err != unix.EBUSY:
			return pathError("rmdir", path, err)
		}
		if pids, _ := readPids(filepath.Join(path, "cgroup.procs")); len(pids) > 0 {
			return fmt.Errorf("%w (processes in it: %d)", pathError("rmdir", path, err), len(pids))
		}
		if attempt == 5 {
			return pathError("rmdir", path, err)
		}
		time.Sleep(delay)
		delay *= 2
	}
}

// readPids parses a cgroup.procs file. A cgroup that is gone has no
// processes, which keeps Kill and Pids usable on a half-deleted group.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		pid, err := strconv.Atoi(string(f))
		if err != nil {
			return nil, fmt.Errorf("cgroup: parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// readInt reads a file holding one number.
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: parse %s: %w", path, err)
	}
	return v, nil
}

// readKey reads the value of key from a flat keyed file such as
// memory.events ("oom_kill 3").
func readKey(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if ok && string(k) == key {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cgroup: parse %s: %w", path, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("cgroup: %s has no %s: %w", path, key, fs.ErrNotExist)
}

func pathError(op, path string, err error) error {
	return fmt.Errorf("cgroup: %w", &fs.PathError{Op: op, Path: path, Err: err})
}
