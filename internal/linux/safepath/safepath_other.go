//go:build !linux

package safepath

import (
	"fmt"
	"os"
	"runtime"
)

// OpenDir fails: the safe walk is written for Linux.
func OpenDir(root *os.File, rel string) (*os.File, error) { return nil, unsupported() }

// MkdirAll fails: the safe walk is written for Linux.
func MkdirAll(root *os.File, rel string, mode uint32) (*os.File, error) { return nil, unsupported() }

func unsupported() error { return fmt.Errorf("safepath: unsupported on %s", runtime.GOOS) }
