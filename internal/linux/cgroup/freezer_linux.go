//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// freezeTimeout bounds how long Freeze waits for every task to stop.
const freezeTimeout = 5 * time.Second

// Freeze stops every process in the group where it is (the v1 freezer,
// or else v2's cgroup.freeze) and returns once all are frozen: their
// memory stays, and they run on after Thaw as if nothing happened. It
// fails with errors.ErrUnsupported when no freezer is mounted; a group
// that cannot freeze within 5 seconds is thawed again and the error says
// so.
func (g *Group) Freeze() error {
	file, want, err := g.freezerFile()
	if err != nil {
		return err
	}
	if err := g.freeze(true); err != nil {
		return fmt.Errorf("cgroup: freeze %s: %w", g.name, err)
	}
	deadline := time.Now().Add(freezeTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		b, err := os.ReadFile(file)
		if err != nil {
			g.freeze(false)
			return fmt.Errorf("cgroup: freeze %s: %w", g.name, err)
		}
		if bytes.Contains(b, want) {
			return nil
		}
		if time.Now().After(deadline) {
			g.freeze(false)
			return fmt.Errorf("cgroup: freeze %s: not frozen after %v (%s)", g.name, freezeTimeout, bytes.TrimSpace(b))
		}
		time.Sleep(wait)
	}
}

// Thaw lets the group's processes run again. Thawing a group that is
// not frozen is not an error.
func (g *Group) Thaw() error {
	if _, _, err := g.freezerFile(); err != nil {
		return err
	}
	if err := g.freeze(false); err != nil {
		return fmt.Errorf("cgroup: thaw %s: %w", g.name, err)
	}
	return nil
}

// Frozen reports whether the group is frozen.
func (g *Group) Frozen() (bool, error) {
	file, want, err := g.freezerFile()
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return false, fmt.Errorf("cgroup: %w", err)
	}
	return bytes.Contains(b, want), nil
}

// freezerFile is the file that tells whether the group is frozen, and
// what it holds then: the same freezer freeze writes to.
func (g *Group) freezerFile() (string, []byte, error) {
	for _, d := range g.dirs {
		if d.has("freezer") {
			return filepath.Join(d.path, "freezer.state"), []byte("FROZEN"), nil
		}
	}
	for _, d := range g.dirs {
		if d.v2 {
			f := filepath.Join(d.path, "cgroup.events")
			if _, err := os.Stat(filepath.Join(d.path, "cgroup.freeze")); err == nil {
				return f, []byte("frozen 1"), nil
			}
		}
	}
	return "", nil, fmt.Errorf("cgroup: %s has no freezer (neither the v1 freezer nor cgroup.freeze): %w", g.name, errors.ErrUnsupported)
}
