package manager

import (
	"context"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcpbox/mcpbox"
)

// checkVolume allows a mapping only when its host path, with symlinks
// resolved, lies under one of the allow-listed roots: a link inside a root
// that points elsewhere does not get out. It returns the mapping with Root
// set and HostPath resolved; the runtime opens HostPath beneath Root
// without following links, so one swapped in after this check is refused
// rather than followed.
func (m *Manager) checkVolume(v mcpbox.Volume) (mcpbox.Volume, error) {
	if err := v.Validate(); err != nil {
		return v, err
	}
	real, err := filepath.EvalSymlinks(v.HostPath)
	if err != nil {
		return v, mcpbox.Errorf(mcpbox.EINVALID, "volume %s: host path: %v", v, err).
			WithSuggestion("create the directory, or fix the path")
	}
	for _, root := range m.opts.VolumeRoots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if real == r || strings.HasPrefix(real, r+string(filepath.Separator)) {
			v.HostPath, v.Root = real, r
			return v, nil
		}
	}
	return v, mcpbox.Errorf(mcpbox.EINVALID, "volume %s: %s is outside the allowed volume roots %v", v, real, m.opts.VolumeRoots).
		With("volume", v.String()).
		WithSuggestion("add its parent to volume_roots in the config, or choose a path under one of them")
}

// volumesFor is every mapping a new session gets: the configured ones,
// then the caller's, each checked. A writable volume may not contain
// another volume's host path, nor lie inside one: what a sandbox writes in
// one must never change what another mapping resolves to.
func (m *Manager) volumesFor(req []mcpbox.Volume) ([]mcpbox.Volume, error) {
	all := slices.Clone(m.volumes)
	for _, v := range req {
		cv, err := m.checkVolume(v)
		if err != nil {
			return nil, err
		}
		all = append(all, cv)
	}
	seen := map[string]bool{}
	for i, v := range all {
		if seen[v.SandboxPath] {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "two volumes mount at %s", v.SandboxPath)
		}
		seen[v.SandboxPath] = true
		for j, w := range all {
			if i == j || v.ReadOnly || !within(w.HostPath, v.HostPath) {
				continue
			}
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "volume %s is inside the writable volume %s", w, v).
				WithSuggestion("map the outer directory alone, or make it read-only")
		}
	}
	return all, nil
}

// within reports whether path is dir or lies beneath it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// Volumes returns the volume mappings of owner's session (what the
// get_volume_path tool reports).
func (m *Manager) Volumes(ctx context.Context, owner, id string) ([]mcpbox.Volume, error) {
	s, err := m.Get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return s.Volumes, nil
}

// DefaultVolumes returns the volumes every new session gets (the config's
// that passed their checks).
func (m *Manager) DefaultVolumes() []mcpbox.Volume { return slices.Clone(m.volumes) }
