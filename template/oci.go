package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/mcpbox/mcpbox"
)

// Progress receives one line per step of a long operation; nil is silent.
type Progress func(msg string)

func (p Progress) say(format string, args ...any) {
	if p != nil {
		p(fmt.Sprintf(format, args...))
	}
}

// Import makes template name from the image at path: an OCI image
// layout (a directory with oci-layout and index.json), or an image
// tarball (`docker save`, `podman save`, or an OCI layout in a tar).
func (s *Store) Import(ctx context.Context, name, src string, progress Progress) (*mcpbox.Template, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "import %s: %v", src, err)
	}
	var img v1.Image
	if fi.IsDir() {
		img, err = imageFromLayout(src)
	} else {
		var cleanup func()
		img, cleanup, err = s.imageFromTar(src)
		if cleanup != nil {
			defer cleanup()
		}
	}
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "import %s: %v", src, err).
			WithSuggestion("give an OCI image layout directory, or a tarball from `docker save` or `podman save`")
	}
	abs, _ := filepath.Abs(src)
	return s.fromImage(ctx, name, img, "oci:"+abs, progress)
}

// imageFromLayout picks the layout's image for this machine's platform
// (its only one, when it has one).
func imageFromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	return pickImage(idx, 0)
}

func pickImage(idx v1.ImageIndex, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, errors.New("image indexes nested too deep")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var candidates []v1.Descriptor
	for _, d := range im.Manifests {
		if d.Platform != nil && (d.Platform.OS != "" && d.Platform.OS != "linux" ||
			d.Platform.Architecture != "" && d.Platform.Architecture != runtime.GOARCH) {
			continue
		}
		candidates = append(candidates, d)
	}
	if len(candidates) == 0 {
		return nil, fmt.Errorf("no image for linux/%s in it", runtime.GOARCH)
	}
	d := candidates[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		return pickImage(child, depth+1)
	}
	return idx.Image(d.Digest)
}

// imageFromTar reads a `docker save` tarball (it has manifest.json) or an
// OCI layout in a tar (unpacked to a temporary directory first).
func (s *Store) imageFromTar(src string) (v1.Image, func(), error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var docker, oci bool
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("not an image tarball: %w", err)
		}
		switch path.Clean(hdr.Name) {
		case "manifest.json":
			docker = true
		case "oci-layout":
			oci = true
		}
	}
	switch {
	case docker:
		img, err := tarball.ImageFromPath(src, nil)
		return img, nil, err
	case oci:
		tmp, err := s.tmpDir()
		if err != nil {
			return nil, nil, err
		}
		cleanup := func() { removeAll(tmp) }
		if err := untarPlain(src, tmp, s.maxBytes); err != nil {
			return nil, cleanup, err
		}
		img, err := imageFromLayout(tmp)
		return img, cleanup, err
	}
	return nil, nil, errors.New("the tarball has neither manifest.json (docker save) nor oci-layout (an OCI layout)")
}

// untarPlain unpacks the regular files and directories of an archive
// into dir, names confined to it; anything else is ignored.
func untarPlain(src, dir string, limit int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if rel == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if limit -= hdr.Size; limit < 0 {
				return errors.New("the archive is larger than the limit")
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		}
	}
}

// PullOptions tune Pull.
type PullOptions struct {
	// Insecure allows plain HTTP (and unverified TLS) to the registry,
	// for a registry on localhost.
	Insecure bool
	// Keychain finds credentials; default authn.DefaultKeychain, which
	// reads ~/.docker/config.json (and $DOCKER_CONFIG).
	Keychain authn.Keychain
}

// Pull makes template name from image ref in a registry.
func (s *Store) Pull(ctx context.Context, tmplName, ref string, o *PullOptions, progress Progress) (*mcpbox.Template, error) {
	if err := ValidateName(tmplName); err != nil {
		return nil, err
	}
	if o == nil {
		o = &PullOptions{}
	}
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "pull: invalid image reference %q: %v", ref, err)
	}
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	progress.say("pulling %s", r.Name())
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		e := mcpbox.Errorf(mcpbox.EUNAVAILABLE, "pull %s: %v", r.Name(), err)
		if !o.Insecure && strings.Contains(err.Error(), "http: server gave HTTP response to HTTPS client") {
			e = e.WithSuggestion("the registry speaks plain HTTP: add --insecure if it is on this machine")
		}
		return nil, e
	}
	return s.fromImage(ctx, tmplName, img, "registry:"+r.Name(), progress)
}

// FromImage makes template name from img, which any go-containerregistry
// source gives.
func (s *Store) FromImage(ctx context.Context, name string, img v1.Image, source string, progress Progress) (*mcpbox.Template, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return s.fromImage(ctx, name, img, source, progress)
}

func (s *Store) fromImage(ctx context.Context, name string, img v1.Image, source string, progress Progress) (*mcpbox.Template, error) {
	if Canonical(name) != name || name == mcpbox.HostTemplate {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "%q names a built-in template; choose another name", name)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "read the image's config: %v", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "read the image's layers: %v", err)
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	budget := s.maxBytes
	t := &mcpbox.Template{Name: name, Source: source, Created: time.Now().UTC()}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		diff, err := l.DiffID()
		if err != nil {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "layer %d: %v", i+1, err)
		}
		want := diff.String()
		if s.storedAs(want) != "" {
			progress.say("layer %d/%d %s: already stored", i+1, len(layers), short(want))
		} else {
			size, _ := l.Size()
			progress.say("layer %d/%d %s: %.1f MB", i+1, len(layers), short(want), float64(size)/1e6)
		}
		start := time.Now()
		got, st, err := s.addLayer(want, l.Uncompressed, t.Layers, &budget)
		if err != nil {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "layer %d/%d %s: %v", i+1, len(layers), short(want), err)
		}
		if st.bytes > 0 {
			progress.say("layer %d/%d %s: unpacked %.1f MB in %s", i+1, len(layers), short(got), float64(st.bytes)/1e6, time.Since(start).Round(time.Millisecond))
		}
		if len(st.skipped) > 0 {
			s.log.Debug("layer entries skipped (devices)", "layer", got, "entries", st.skipped)
		}
		t.Layers = append(t.Layers, got)
	}
	t.User, t.Workdir, t.Env = cf.Config.User, cf.Config.WorkingDir, parseEnv(cf.Config.Env)
	s.detect(t)
	if err := s.save(t); err != nil {
		return nil, err
	}
	progress.say("template %s: %d layers, %.1f MB, languages %v", name, len(t.Layers), float64(t.Size)/1e6, t.Languages)
	return t, nil
}

func parseEnv(env []string) map[string]string {
	if len(env) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k != "" && !strings.ContainsRune(k, 0) {
			out[k] = v
		}
	}
	return out
}

// langBinaries are the programs that say a template offers a language.
var langBinaries = map[mcpbox.Language][]string{
	mcpbox.Python:     {"python3"},
	mcpbox.JavaScript: {"node", "nodejs"},
	mcpbox.Shell:      {"sh"},
}

// detect fills in what t offers: its languages and its shell.
func (s *Store) detect(t *mcpbox.Template) {
	t.Languages = s.detectLanguages(t.Layers)
	t.Shell = "/bin/sh"
	if s.lookup(t.Layers, "bin/bash") || s.lookup(t.Layers, "usr/bin/bash") {
		t.Shell = "/bin/bash"
	}
}

// detectLanguages looks for each language's program in the usual bin
// directories of the merged layers (top first, whiteouts respected).
func (s *Store) detectLanguages(layers []string) []mcpbox.Language {
	var out []mcpbox.Language
	for lang, bins := range langBinaries {
	search:
		for _, b := range bins {
			for _, d := range []string{"usr/local/bin", "usr/bin", "bin"} {
				if s.lookup(layers, path.Join(d, b)) {
					out = append(out, lang)
					break search
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// lookup reports whether rel exists in the merged view of layers. It
// follows a top-level directory symlink (merged /usr: bin -> usr/bin).
func (s *Store) lookup(layers []string, rel string) bool {
	for depth := 0; depth < 4; depth++ {
		first, rest, _ := strings.Cut(rel, "/")
		redirected := false
		for i := len(layers) - 1; i >= 0; i-- {
			root := s.LayerDir(layers[i])
			if fi, err := os.Lstat(filepath.Join(root, first)); err == nil && fi.Mode()&os.ModeSymlink != 0 && rest != "" {
				target, _ := os.Readlink(filepath.Join(root, first))
				rel = path.Join(strings.TrimPrefix(path.Clean("/"+target), "/"), rest)
				redirected = true
				break
			}
			p := filepath.Join(root, rel)
			if fi, err := os.Lstat(p); err == nil {
				return !isWhiteout(p, fi)
			}
			if opaqueAbove(root, rel) {
				return false
			}
		}
		if !redirected {
			return false
		}
	}
	return false
}

// opaqueAbove reports whether a directory on the way to rel in the
// layer at root is opaque: the layers below have nothing there.
func opaqueAbove(root, rel string) bool {
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if opaque(filepath.Join(root, d)) {
			return true
		}
	}
	return false
}
