//go:build !linux

package cgroup

import (
	"fmt"
	"runtime"
)

// Group is one sandbox's cgroups; cgroups exist only on Linux.
type Group struct{}

func unsupported() error { return fmt.Errorf("cgroup: unsupported on %s", runtime.GOOS) }

// New fails: cgroups exist only on Linux.
func New(name string, l Limits) (*Group, error) { return nil, unsupported() }

// Load fails: cgroups exist only on Linux.
func Load(name string) (*Group, error) { return nil, unsupported() }

// List fails: cgroups exist only on Linux.
func List(prefix string) ([]string, error) { return nil, unsupported() }

// Probe reports that this host has no cgroups.
func Probe() Info { return Info{Version: "none", Controllers: map[string]bool{}} }

// Name returns "".
func (g *Group) Name() string { return "" }

// Add fails: cgroups exist only on Linux.
func (g *Group) Add(pid int) error { return unsupported() }

// Pids fails: cgroups exist only on Linux.
func (g *Group) Pids() ([]int, error) { return nil, unsupported() }

// Kill fails: cgroups exist only on Linux.
func (g *Group) Kill() error { return unsupported() }

// Delete fails: cgroups exist only on Linux.
func (g *Group) Delete() error { return unsupported() }

// Stats fails: cgroups exist only on Linux.
func (g *Group) Stats() (Stats, error) { return Stats{}, unsupported() }
