//go:build !linux

package caps

import (
	"fmt"
	"runtime"
)

// DropBoundingSet fails: capabilities exist only on Linux.
func DropBoundingSet() error { return fmt.Errorf("caps: unsupported on %s", runtime.GOOS) }
