//go:build !linux || !amd64

package seccomp

import (
	"fmt"
	"runtime"
)

// Install is only implemented on linux/amd64: the policy is written for the
// x86_64 syscall table.
func Install() error { return unsupported() }

// Supported reports that seccomp is not available on this platform.
func Supported() error { return unsupported() }

func unsupported() error {
	if runtime.GOOS == "linux" {
		return fmt.Errorf("seccomp: unsupported on linux/%s (the policy is written for x86_64)", runtime.GOARCH)
	}
	return fmt.Errorf("seccomp: unsupported on %s", runtime.GOOS)
}
