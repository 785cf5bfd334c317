package local

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/linux/mount"
	"github.com/mcpbox/mcpbox/internal/linux/rootfs"
	"github.com/mcpbox/mcpbox/template"
)

// Templates: a sandbox from a template gets, instead of the host's /usr,
// the overlay of its layers, which live in $MCPBOX_HOME/templates (see
// package template). PID 1 is handed a read-only copy of the layer
// store's directory (a detached mount, like the kernel drivers) and
// mounts the layers it is told to from there: nothing is copied. A
// template based on the host's system (a commit of a host-template
// session) gets both: its layers, and the host's /usr bound on top.
//
// The agent needs nothing from the image: PID 1 is this binary, started
// from the host before the root changes and never executed again from
// inside, so an image without mcpbox, or with another libc, or none,
// runs it just the same.

// fdDisk is where every sandbox's PID 1 keeps its tmpfs open: the host
// reads the overlay's upper directory through
// /proc/<pid>/fd/<fdDisk>/upper (Commit), the host template's sessions'
// too. High, out of the way of what the agent opens.
const fdDisk = 1000

// templates is the runtime's template store, opened on first use.
type templates struct {
	once  sync.Once
	store *template.Store
	err   error
}

// Templates returns the template store sandboxes are made from.
func (r *Runtime) Templates() (*template.Store, error) {
	r.tmpl.once.Do(func() {
		r.tmpl.store, r.tmpl.err = template.Open(filepath.Join(r.home, "templates"), &template.Options{UIDBase: r.uidBase, Logger: r.log})
	})
	return r.tmpl.store, r.tmpl.err
}

// openTemplate resolves spec's template: nil for the host's. For
// another it hands h a copy of the layer store to attach.
func (r *Runtime) openTemplate(name string, h *handoff) (*mcpbox.Template, error) {
	if template.Canonical(name) == mcpbox.HostTemplate {
		return nil, nil
	}
	s, err := r.Templates()
	if err != nil {
		return nil, err
	}
	t, err := s.Get(name)
	if err != nil {
		return nil, err
	}
	if len(t.Layers) == 0 {
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "template %s has no layers", t.Name)
	}
	if !r.rootless {
		if h.layers, err = mount.Clone(nil, s.LayersDir(), true); err != nil {
			return nil, fmt.Errorf("template %s: %w", t.Name, err)
		}
	}
	return t, nil
}

// templateConfig tells PID 1 how to build a root from t.
func (r *Runtime) templateConfig(t *mcpbox.Template, h *handoff, cfg *initConfig) {
	if t == nil {
		return
	}
	s, _ := r.Templates()
	for i := len(t.Layers) - 1; i >= 0; i-- {
		cfg.Layers = append(cfg.Layers, strings.TrimPrefix(t.Layers[i], "sha256:"))
	}
	if h.layers != nil {
		cfg.LayersFD = h.layersFD
	} else {
		cfg.LayersDir = s.LayersDir()
	}
	cfg.Template, cfg.HostSystem = t.Name, t.HostSystem
	if t.Workdir != "" && t.Workdir != "/" {
		cfg.Workdir = filepath.Clean("/" + t.Workdir)
	}
	env := maps.Clone(t.Env)
	if env == nil {
		env = map[string]string{}
	}
	// HOME and USER are the sandbox's user's, whoever the image expected.
	delete(env, "HOME")
	delete(env, "USER")
	delete(env, "HOSTNAME")
	maps.Copy(env, cfg.Env)
	cfg.Env = env
}

// UpperDir returns the host path of sandbox id's overlay upper directory:
// everything the sandbox changed in its root (commit).
func (r *Runtime) UpperDir(ctx context.Context, id string) (string, error) {
	st, err := readState(filepath.Join(r.dir(id), "sandbox.json"))
	if err != nil || !running(st.PID, st.StartTime) {
		return "", mcpbox.Errorf(mcpbox.ESESSION, "sandbox %s is not running", id)
	}
	p := "/proc/" + strconv.Itoa(st.PID) + "/fd/" + strconv.Itoa(fdDisk) + "/upper"
	if _, err := os.Stat(p); err != nil {
		return "", mcpbox.Errorf(mcpbox.EUNSUPPORTED, "sandbox %s: its changes cannot be read (%v)", id, err).
			WithSuggestion("only sandboxes started by this version can be committed: start a new session")
	}
	return p, nil
}

// SandboxTemplate returns the template sandbox id was made from ("" for
// the host's) as its record says.
func (r *Runtime) SandboxTemplate(id string) (string, error) {
	st, err := readState(filepath.Join(r.dir(id), "sandbox.json"))
	if err != nil {
		return "", mcpbox.Errorf(mcpbox.ESESSION, "no sandbox %s on this machine", id)
	}
	return st.Template, nil
}

// TemplateUsers lists the live sandboxes made from template name: what
// keeps it from being removed.
func (r *Runtime) TemplateUsers(ctx context.Context, name string) ([]string, error) {
	ents, err := os.ReadDir(r.sessionsDir())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		st, err := readState(filepath.Join(r.sessionsDir(), e.Name(), "sandbox.json"))
		if err != nil || st.Template != name || !running(st.PID, st.StartTime) {
			continue
		}
		out = append(out, "sandbox "+st.ID)
	}
	return out, nil
}

// templateOptions is PID 1's side of templateConfig: the layer store to
// attach and the layers to stack. Every sandbox keeps its disk open for
// Commit, the host template's too.
func templateOptions(cfg *initConfig, opts *rootfs.Options) error {
	opts.KeepDiskFD = fdDisk
	if cfg.Template == "" {
		return nil
	}
	var err error
	switch {
	case cfg.LayersFD > 2 && cfg.LayersFD <= fdLast:
		opts.Layers = os.NewFile(uintptr(cfg.LayersFD), "layers")
	case cfg.LayersDir != "":
		if opts.Layers, err = mount.Clone(nil, cfg.LayersDir, true); err != nil {
			return step("template layers", err)
		}
	default:
		return step("template layers", fmt.Errorf("template %s: no layer store handed in", cfg.Template))
	}
	opts.LayerNames, opts.Workdir, opts.HostSystem = cfg.Layers, cfg.Workdir, cfg.HostSystem
	return nil
}
