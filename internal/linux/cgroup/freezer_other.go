//go:build !linux

package cgroup

// Freeze is unsupported off Linux.
func (g *Group) Freeze() error { return unsupported() }

// Thaw is unsupported off Linux.
func (g *Group) Thaw() error { return unsupported() }

// Frozen is unsupported off Linux.
func (g *Group) Frozen() (bool, error) { return false, unsupported() }
