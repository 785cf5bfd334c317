//go:build !linux

package rootfs

import (
	"fmt"
	"os"
	"runtime"
)

// Build fails: sandbox roots are built only on Linux.
func Build(o Options) (*os.File, error) { return nil, unsupported() }

// Pivot fails: sandbox roots are built only on Linux.
func Pivot(root *os.File) error { return unsupported() }

func unsupported() error { return fmt.Errorf("rootfs: unsupported on %s", runtime.GOOS) }

// EnsureUser fails: sandbox roots are built only on Linux.
func EnsureUser(uid int, home string) error { return unsupported() }
