// Package ucount sets the limits the kernel keeps per user namespace.
//
// Some kernel objects are counted per user and per user namespace (the
// kernel's "ucounts", kernel/ucount.c): inotify instances and watches,
// fanotify groups and marks, and namespaces of each kind. Creating one
// charges the creator's (namespace, uid) and then, one level up at a
// time, the uid that created each enclosing user namespace, up to the
// initial one; each level is checked against the maximum of the
// namespace it lives in, /proc/sys/user/max_* as seen from there. A
// sandbox's objects thus count against the host user that created its
// namespace (root, for mcpbox), whose maximum is the host's sysctl
// (fs.inotify.max_user_instances, default 128). Without a limit of its
// own (a new namespace starts at INT_MAX) one sandbox could take the
// host root's whole allowance.
//
// A process that is root in its user namespace, with CAP_SYS_RESOURCE
// there, may write its namespace's maximums; [Set] does, from the
// sandbox's PID 1 before it drops its capabilities. The limits then hold
// for every uid of the sandbox separately, and nobody inside can raise
// them again.
package ucount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// dir is where the calling process's user namespace shows its maximums.
const dir = "/proc/sys/user"

// Set writes each maximum in limits, keyed by its file name in
// /proc/sys/user (max_inotify_instances, max_mnt_namespaces, …), for the
// calling process's user namespace. A name this kernel does not know is
// skipped: fanotify's arrived in Linux 5.13, time namespaces' in 5.6.
func Set(limits map[string]int64) error {
	for name, v := range limits {
		if strings.ContainsRune(name, '/') {
			return fmt.Errorf("ucount: bad limit name %q", name)
		}
		err := write(filepath.Join(dir, name), strconv.FormatInt(v, 10))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("set %s to %d: %w", name, v, err)
		}
	}
	return nil
}

func write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Get reads a maximum of the calling process's user namespace.
func Get(name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
