package local

import (
	"context"
	"errors"
	"io/fs"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/linux/cgroup"
)

// Pause freezes every process of sandbox id, its agent included, with the
// cgroup freezer, and returns once they are frozen. Their memory stays;
// Resume lets them run on. Rootless sandboxes have no cgroup of their own
// and cannot be paused.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	g, err := r.freezer(id)
	if err != nil {
		return err
	}
	if err := g.Freeze(); err != nil {
		return mcpbox.Errorf(mcpbox.EINTERNAL, "pause sandbox %s", id).Wrap(err)
	}
	return nil
}

// Resume thaws sandbox id. A sandbox that is not frozen is left as it is.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	g, err := r.freezer(id)
	if err != nil {
		return err
	}
	if err := g.Thaw(); err != nil {
		return mcpbox.Errorf(mcpbox.EINTERNAL, "resume sandbox %s", id).Wrap(err)
	}
	return nil
}

func (r *Runtime) freezer(id string) (*cgroup.Group, error) {
	if err := mcpbox.ValidateID(id); err != nil {
		return nil, err
	}
	if r.rootless {
		return nil, mcpbox.Errorf(mcpbox.EUNSUPPORTED, "pausing a sandbox needs the cgroup freezer, which a rootless mcpbox has no cgroups for").
			WithSuggestion("run mcpbox as root to pause sandboxes")
	}
	g, err := cgroup.Load(r.cgroupName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, mcpbox.Errorf(mcpbox.ESESSION, "sandbox %s has no cgroup: it is not running", id)
	}
	if err != nil {
		return nil, err
	}
	return g, nil
}
