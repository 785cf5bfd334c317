//go:build !linux

package ucount

import (
	"fmt"
	"runtime"
)

// Set fails: user-namespace limits exist only on Linux.
func Set(limits map[string]int64) error { return unsupported() }

// Get fails: user-namespace limits exist only on Linux.
func Get(name string) (int64, error) { return 0, unsupported() }

func unsupported() error { return fmt.Errorf("ucount: unsupported on %s", runtime.GOOS) }
