//go:build !linux

package rootfs

import (
	"fmt"
	"runtime"
)

// Build fails: sandbox roots are built only on Linux.
func Build(o Options) (string, error) { return "", unsupported() }

// Pivot fails: sandbox roots are built only on Linux.
func Pivot(root string) error { return unsupported() }

func unsupported() error { return fmt.Errorf("rootfs: unsupported on %s", runtime.GOOS) }
