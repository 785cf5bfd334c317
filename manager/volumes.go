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
// that points elsewhere does not get out.
func (m *Manager) checkVolume(v mcpbox.Volume) error {
	if err := v.Validate(); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(v.HostPath)
	if err != nil {
		return mcpbox.Errorf(mcpbox.EINVALID, "volume %s: host path: %v", v, err)
	}
	for _, root := range m.opts.VolumeRoots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if real == r || strings.HasPrefix(real, r+string(filepath.Separator)) {
			return nil
		}
	}
	return mcpbox.Errorf(mcpbox.EINVALID, "volume %s: %s is outside the allowed volume roots %v", v, real, m.opts.VolumeRoots).
		With("volume", v.String()).
		WithSuggestion("add its parent to volume_roots in the config, or choose a path under one of them")
}

// volumesFor is every mapping a new session gets: the configured ones,
// then the caller's, each checked.
func (m *Manager) volumesFor(req []mcpbox.Volume) ([]mcpbox.Volume, error) {
	all := append(append([]mcpbox.Volume(nil), m.opts.Volumes...), req...)
	seen := map[string]bool{}
	for _, v := range all {
		if err := m.checkVolume(v); err != nil {
			return nil, err
		}
		if seen[v.SandboxPath] {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "two volumes mount at %s", v.SandboxPath)
		}
		seen[v.SandboxPath] = true
	}
	return all, nil
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

// DefaultVolumes returns the volumes every new session gets (the config's).
func (m *Manager) DefaultVolumes() []mcpbox.Volume { return slices.Clone(m.opts.Volumes) }
