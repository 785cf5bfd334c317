//go:build !linux

package loopback

import (
	"fmt"
	"runtime"
)

// Up fails: network namespaces exist only on Linux.
func Up() error { return fmt.Errorf("loopback: unsupported on %s", runtime.GOOS) }
