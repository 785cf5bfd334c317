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

func unsupported() error { return fmt.Errorf("mount: unsupported on %s", runtime.GOOS) }
