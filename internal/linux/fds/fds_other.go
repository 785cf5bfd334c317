//go:build !linux

package fds

import (
	"fmt"
	"runtime"
)

// CloseOnExec fails: descriptor handling here is written for Linux.
func CloseOnExec(from int) error { return unsupported() }

// CloseInherited fails: descriptor handling here is written for Linux.
func CloseInherited(from int) ([]int, error) { return nil, unsupported() }

// List fails: descriptor handling here is written for Linux.
func List() ([]int, error) { return nil, unsupported() }

func unsupported() error { return fmt.Errorf("fds: unsupported on %s", runtime.GOOS) }
