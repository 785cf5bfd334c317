//go:build !linux

package mount

import (
	"fmt"
	"os"
	"runtime"
)

// Mount fails: mounts here are written for Linux.
func Mount(source, target, fstype string, flags uintptr, data string) error { return unsupported() }

// MakePrivate fails: mounts here are written for Linux.
func MakePrivate(path string) error { return unsupported() }

// BindReadOnly fails: mounts here are written for Linux.
func BindReadOnly(src, dst string) error { return unsupported() }

// BindFD fails: mounts here are written for Linux.
func BindFD(src, dst *os.File, readOnly bool) error { return unsupported() }

// Clone fails: mounts here are written for Linux.
func Clone(dir *os.File, path string, readOnly bool) (*os.File, error) { return nil, unsupported() }

// Attach fails: mounts here are written for Linux.
func Attach(tree, dst *os.File, readOnly bool) error { return unsupported() }

// Tmpfs fails: mounts here are written for Linux.
func Tmpfs(sizeBytes, inodes int64, mode os.FileMode) (*os.File, error) { return nil, unsupported() }

func unsupported() error { return fmt.Errorf("mount: unsupported on %s", runtime.GOOS) }
