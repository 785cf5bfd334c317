// Package safepath opens paths beneath a directory without following
// symbolic links, so that a link swapped in after a path was checked
// cannot send the open somewhere else.
//
// A path checked by name and later used by name can be redirected in
// between by whoever may write one of its directories: a link put in
// place of a component leads anywhere on the host. Opening it with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) from a descriptor of its
// root refuses every link on the way and every way out of the root, and
// the descriptor it returns names the directory itself from then on:
// binding from it (see internal/linux/mount) uses no name again. Where
// openat2 is missing (before Linux 5.6) an O_NOFOLLOW walk, one
// component at a time, gives the same answers.
package safepath

import (
	"errors"
	"path/filepath"
	"strings"
)

var (
	// ErrSymlink is returned when a component of the path is a symbolic
	// link.
	ErrSymlink = errors.New("a symbolic link is on the way (paths are opened without following links)")
	// ErrOutside is returned for a path that is not beneath its root.
	ErrOutside = errors.New("not beneath its root")
	// ErrMountCrossing is returned by MkdirAll when a component is a
	// mount point: a directory made there would be made on whatever is
	// mounted, not beneath the root.
	ErrMountCrossing = errors.New("crosses into another mount")
)

// Rel returns path relative to root, both absolute and clean, or
// ErrOutside if path is not root or beneath it.
func Rel(root, path string) (string, error) {
	if !filepath.IsAbs(root) || !filepath.IsAbs(path) || filepath.Clean(root) != root || filepath.Clean(path) != path {
		return "", errors.New("paths must be absolute and clean")
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", ErrOutside
	}
	return rel, nil
}

// components splits a relative, clean path; "." has none.
func components(rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	if filepath.IsAbs(rel) || filepath.Clean(rel) != rel {
		return nil, errors.New("path must be relative and clean")
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == ".." {
			return nil, ErrOutside
		}
	}
	return parts, nil
}
