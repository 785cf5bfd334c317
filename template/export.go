package template

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/mcpbox/mcpbox"
)

// Export writes template name as an OCI image layout in dir (made when
// missing; an existing layout gets the image added): its layers re-packed
// with the image's own ids and OCI whiteouts, and its env, user and
// working directory in the image config. The image is annotated with the
// template's name (org.opencontainers.image.ref.name). The host template
// and templates based on it (HostSystem) are refused: the host's /usr is
// not theirs to export.
func (s *Store) Export(ctx context.Context, name, dir string, progress Progress) (v1.Hash, error) {
	t, err := s.Get(name)
	if err != nil {
		return v1.Hash{}, err
	}
	if t.Name == mcpbox.HostTemplate {
		return v1.Hash{}, mcpbox.Errorf(mcpbox.EUNSUPPORTED, "the host template is the host's /usr: it cannot be exported").
			WithSuggestion("export a stored template (`mcpbox template ls`)")
	}
	if t.HostSystem {
		return v1.Hash{}, mcpbox.Errorf(mcpbox.EUNSUPPORTED, "template %s cannot be exported: it is based on the host's system (a commit of a host-template session), "+
			"and its layers hold only what the session wrote, not the host's /usr it runs on", t.Name).
			With("template", t.Name).
			WithSuggestion("to export an image, make the session from a stored template (`mcpbox template build python`, `template import`) and commit that one")
	}
	tmp, err := s.tmpDir()
	if err != nil {
		return v1.Hash{}, err
	}
	defer removeAll(tmp)
	var layers []v1.Layer
	for i, d := range t.Layers {
		progress.say("layer %d/%d %s", i+1, len(t.Layers), short(d))
		p := filepath.Join(tmp, fmt.Sprintf("%d.tar.gz", i))
		if err := s.packLayer(ctx, s.LayerDir(d), p); err != nil {
			return v1.Hash{}, fmt.Errorf("export layer %s: %w", short(d), err)
		}
		l, err := tarball.LayerFromFile(p)
		if err != nil {
			return v1.Hash{}, err
		}
		diff, err := l.DiffID()
		if err != nil {
			return v1.Hash{}, err
		}
		if err := s.addAlias(diff.String(), d); err != nil {
			return v1.Hash{}, fmt.Errorf("export layer %s: %w", short(d), err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", runtime.GOARCH, v1.Time{Time: t.Created}
	cf.Config.User, cf.Config.WorkingDir = t.User, t.Workdir
	keys := make([]string, 0, len(t.Env))
	for k := range t.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cf.Config.Env = append(cf.Config.Env, k+"="+t.Env[k])
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return v1.Hash{}, err
	}
	var p layout.Path
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		p, err = layout.FromPath(dir)
		if err != nil {
			return v1.Hash{}, err
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return v1.Hash{}, err
		}
	} else {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": t.Name})); err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err == nil {
		progress.say("exported %s as %s to %s", t.Name, digest, dir)
	}
	return digest, err
}

// packLayer writes layer directory src as a gzip tar stream to dst.
func (s *Store) packLayer(ctx context.Context, src, dst string) error {
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err := s.writeTar(ctx, zw, src); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
