// Package template keeps the root filesystems sandboxes start from.
//
// A template is a stack of layers plus a little metadata (mcpbox.Template).
// Layers are stored once each, by the digest of their uncompressed tar
// stream, as plain directory trees the local runtime mounts as overlay
// lower layers: a sandbox from a template copies nothing. Two templates
// that share a base layer store it once.
//
//	$MCPBOX_HOME/templates/
//	  layers/<hex>/        one layer's tree, owned as the sandbox sees it
//	  layerinfo/<hex>.json its size and the uid base its owners are mapped to
//	  layerinfo/<hex>.alias the stored layer an exported tar stream <hex> unpacks to
//	  images/<name>.json   a template: its layers, bottom first, and metadata
//	  tmp/                 layers being extracted
//	  lock                 flock: one writer at a time
//
// Layers come from OCI images (an image layout, a `docker save` tarball, a
// registry), from a session's changes (Commit) and from Debian builds.
// Each tar stream is applied the way container runtimes do: whiteouts
// become overlay whiteouts, hard links, symlinks and permissions are kept,
// device nodes are skipped, no path escapes the layer, and owners are
// mapped into the sandbox's user namespace (uid N in the image is host
// uid UIDBase+N, the uid a sandbox's N maps to). Setuid and setgid bits
// and extended attributes are dropped: nothing in an image may carry
// privilege, and an image's own overlay attributes could forge whiteouts.
//
// The host template, "default", is not stored here: it is the host's /usr.
// A commit of one of its sessions is (mcpbox.Template.HostSystem): its
// layers hold what the session wrote, and go on top of the host's /usr.
package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// UIDBase is the host uid that uid 0 of a sandbox maps to when mcpbox
	// runs as root (the local runtime's UIDBase); default 100000. Without
	// root every file is owned by the caller, as in a rootless sandbox.
	UIDBase int
	// MaxBytes bounds what one image may unpack to; default 32 GiB.
	MaxBytes int64
	// InUse says which live sessions or pools use a template; Remove
	// refuses while it names any. Nil: nothing is in use.
	InUse func(ctx context.Context, name string) ([]string, error)
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// Store is the templates under one directory. Several processes may share
// it: writers take a file lock, readers see whole files (renames).
type Store struct {
	dir      string
	uidBase  int
	rootless bool
	maxBytes int64
	inUse    func(ctx context.Context, name string) ([]string, error)
	log      *slog.Logger
	cache    *sync.Map // name → cached, for Template
}

var _ mcpbox.TemplateCatalog = (*Store)(nil)

// Open returns the store at dir ($MCPBOX_HOME/templates), creating it.
func Open(dir string, o *Options) (*Store, error) {
	if o == nil {
		o = &Options{}
	}
	s := &Store{dir: dir, uidBase: o.UIDBase, rootless: os.Geteuid() != 0, maxBytes: o.MaxBytes, inUse: o.InUse, log: o.Logger,
		cache: &sync.Map{}}
	if s.uidBase == 0 {
		s.uidBase = 100000
	}
	if s.maxBytes == 0 {
		s.maxBytes = 32 << 30
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	for _, d := range []string{"layerinfo", "images", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
	}
	// layers/ is what a sandbox's PID 1 is handed (a read-only copy of
	// this directory's mount): it must be able to search it, as a uid with
	// no rights of its own. The store's 0700 keeps the host's users out.
	if err := os.MkdirAll(s.LayersDir(), 0o755); err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	if err := os.Chmod(s.LayersDir(), 0o755); err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	return s, nil
}

// WithInUse returns a copy of s whose Remove asks inUse who uses a
// template (see Options.InUse).
func (s *Store) WithInUse(inUse func(ctx context.Context, name string) ([]string, error)) *Store {
	c := *s
	c.inUse = inUse
	return &c
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// LayersDir holds one directory per layer, named by its digest's hex.
func (s *Store) LayersDir() string { return filepath.Join(s.dir, "layers") }

// LayerDir is where the layer with digest ("sha256:…") is stored.
func (s *Store) LayerDir(digest string) string {
	return filepath.Join(s.LayersDir(), strings.TrimPrefix(digest, "sha256:"))
}

func (s *Store) imagePath(name string) string { return filepath.Join(s.dir, "images", name+".json") }
func (s *Store) infoPath(digest string) string {
	return filepath.Join(s.dir, "layerinfo", strings.TrimPrefix(digest, "sha256:")+".json")
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateName checks a template's name: 1 to 63 lowercase letters,
// digits, '.', '_' and '-', starting with a letter or digit.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return mcpbox.Errorf(mcpbox.EINVALID, "invalid template name %q: use 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// Canonical resolves an alias ("base", "code-interpreter-v1") and "" to
// the name it stands for.
func Canonical(name string) string {
	if name == "" {
		return mcpbox.HostTemplate
	}
	if a, ok := mcpbox.TemplateAliases[name]; ok {
		return a
	}
	return name
}

// Host is the host template's description.
func Host() *mcpbox.Template {
	return &mcpbox.Template{Name: mcpbox.HostTemplate, Source: "host",
		Languages: hostLanguages(), Workdir: "/workspace", Shell: "/bin/bash"}
}

func hostLanguages() []mcpbox.Language {
	var out []mcpbox.Language
	for lang, bins := range langBinaries {
		for _, b := range bins {
			if _, err := os.Stat(filepath.Join("/usr/bin", b)); err == nil {
				out = append(out, lang)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// Get returns template name (aliases resolved) with its layers checked: a
// missing or corrupt layer is an error that says so, never a sandbox
// with a hole in its root.
func (s *Store) Get(name string) (*mcpbox.Template, error) {
	name = Canonical(name)
	if name == mcpbox.HostTemplate {
		return Host(), nil
	}
	t, err := s.read(name)
	if err != nil {
		return nil, err
	}
	if err := s.Check(t); err != nil {
		return nil, err
	}
	return t, nil
}

func (s *Store) read(name string) (*mcpbox.Template, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.imagePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s.unknown(name)
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	var t mcpbox.Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINTERNAL, "template %s: its record %s is corrupt: %v", name, s.imagePath(name), err).
			WithSuggestion("remove it with `mcpbox template rm " + name + "` and make it again")
	}
	if t.HostSystem {
		// Its interpreters are the host's, as they are today.
		t.Languages = hostLanguages()
	}
	return &t, nil
}

// unknown is the error for a template that does not exist: it lists what
// does, and how to make the one asked for when it is a recipe.
func (s *Store) unknown(name string) error {
	names := []string{mcpbox.HostTemplate}
	if ts, err := s.list(); err == nil {
		for _, t := range ts {
			names = append(names, t.Name)
		}
	}
	e := mcpbox.Errorf(mcpbox.ENOTFOUND, "unknown template %q; templates on this machine: %s", name, strings.Join(names, ", ")).
		With("template", name)
	if _, ok := Recipes[name]; ok {
		return e.WithSuggestion("build it with `mcpbox template build " + name + "`")
	}
	return e.WithSuggestion("use one of them, or make it with `mcpbox template pull|import|build`")
}

// layerInfo is layerinfo/<hex>.json.
type layerInfo struct {
	Digest string `json:"digest"`
	// Size is the bytes of its files.
	Size int64 `json:"size"`
	// UIDBase is the host uid its files' owners were mapped from 0 to;
	// -1 when made without root (every file is the maker's).
	UIDBase int       `json:"uid_base"`
	Created time.Time `json:"created"`
}

func (s *Store) wantBase() int {
	if s.rootless {
		return -1
	}
	return s.uidBase
}

// Check verifies every layer of t is stored whole and owned for this
// runtime's user namespaces.
func (s *Store) Check(t *mcpbox.Template) error {
	for _, d := range t.Layers {
		if !strings.HasPrefix(d, "sha256:") || !validHex(d[len("sha256:"):]) {
			return mcpbox.Errorf(mcpbox.EUNAVAILABLE, "template %s: its record names an invalid layer %q", t.Name, d).
				WithSuggestion("remove the template with `mcpbox template rm " + t.Name + "` and make it again")
		}
		info, err := s.layerInfo(d)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Lstat(s.LayerDir(d)); err == nil && !fi.IsDir() {
				err = errors.New("not a directory")
			}
		}
		if err != nil {
			return mcpbox.Errorf(mcpbox.EUNAVAILABLE, "template %s: layer %s is missing or corrupt (%v)", t.Name, short(d), err).
				With("template", t.Name).With("layer", d).
				WithSuggestion("remove the template with `mcpbox template rm " + t.Name + "` and import, pull or build it again")
		}
		if info.UIDBase != s.wantBase() {
			return mcpbox.Errorf(mcpbox.EUNAVAILABLE, "template %s: layer %s was unpacked for uid base %d, this runtime maps sandboxes from %d",
				t.Name, short(d), info.UIDBase, s.wantBase()).
				WithSuggestion("make the template again as the user, and with the uid base, that runs sandboxes")
		}
	}
	return nil
}

func (s *Store) layerInfo(digest string) (*layerInfo, error) {
	b, err := os.ReadFile(s.infoPath(digest))
	if err != nil {
		return nil, err
	}
	var li layerInfo
	if err := json.Unmarshal(b, &li); err != nil {
		return nil, err
	}
	if li.Digest != digest {
		return nil, fmt.Errorf("its record names %s", li.Digest)
	}
	return &li, nil
}

// List returns every stored template by name, the host's first.
func (s *Store) List() ([]*mcpbox.Template, error) {
	ts, err := s.list()
	if err != nil {
		return nil, err
	}
	return append([]*mcpbox.Template{Host()}, ts...), nil
}

func (s *Store) list() ([]*mcpbox.Template, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "images"))
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []*mcpbox.Template
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || ValidateName(name) != nil {
			continue
		}
		if t, err := s.read(name); err == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// Template implements mcpbox.TemplateCatalog. Recipes not built yet are
// refused with the command that builds them: a build downloads hundreds
// of megabytes and takes minutes, which no create call should wait on.
// A template seen before, whose record has not changed since (its
// file's size and time), is answered from memory: a warm-pool create
// looks its template up on every call. Its layers are checked again
// when a sandbox is made from it.
func (s *Store) Template(ctx context.Context, name string, progress func(string)) (*mcpbox.Template, error) {
	name = Canonical(name)
	if name == mcpbox.HostTemplate {
		return Host(), nil
	}
	fi, err := os.Stat(s.imagePath(name))
	if err == nil && ValidateName(name) == nil {
		if c, ok := s.cache.Load(name); ok {
			if e := c.(cached); e.size == fi.Size() && e.mtime.Equal(fi.ModTime()) {
				t := *e.t
				return &t, nil
			}
		}
	}
	t, err := s.Get(name)
	if err != nil {
		return nil, err
	}
	if fi != nil {
		c := *t
		s.cache.Store(name, cached{t: &c, size: fi.Size(), mtime: fi.ModTime()})
	}
	return t, nil
}

// cached is a template record as read, with its file's size and time.
type cached struct {
	t     *mcpbox.Template
	size  int64
	mtime time.Time
}

// Templates implements mcpbox.TemplateCatalog.
func (s *Store) Templates(ctx context.Context) ([]*mcpbox.Template, error) { return s.List() }

// save records t under its name, replacing an older one.
func (s *Store) save(t *mcpbox.Template) error {
	t.Size = 0
	for _, d := range t.Layers {
		if li, err := s.layerInfo(d); err == nil {
			t.Size += li.Size
		}
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(s.imagePath(t.Name), b)
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Remove deletes template name and every layer no other template uses.
// A template a live session or pool uses is refused (Options.InUse).
func (s *Store) Remove(ctx context.Context, name string) error {
	name = Canonical(name)
	if name == mcpbox.HostTemplate {
		return mcpbox.Errorf(mcpbox.EINVALID, "the host template %q cannot be removed", name)
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(s.imagePath(name)); err != nil {
		return s.unknown(name)
	}
	if s.inUse != nil {
		users, err := s.inUse(ctx, name)
		if err != nil {
			return fmt.Errorf("template %s: find its users: %w", name, err)
		}
		if len(users) > 0 {
			return mcpbox.Errorf(mcpbox.ECONFLICT, "template %s is in use by %s", name, strings.Join(users, ", ")).
				With("template", name).
				WithSuggestion("stop those sessions (and take the template out of the config's pools) first")
		}
	}
	if err := os.Remove(s.imagePath(name)); err != nil {
		return fmt.Errorf("remove template %s: %w", name, err)
	}
	return s.gcLocked()
}

// gcLocked removes layers no template names, and leftovers of
// interrupted extractions. The caller holds the lock.
func (s *Store) gcLocked() error {
	keep := map[string]bool{}
	ts, err := s.list()
	if err != nil {
		return err
	}
	for _, t := range ts {
		for _, d := range t.Layers {
			keep[strings.TrimPrefix(d, "sha256:")] = true
		}
	}
	ents, err := os.ReadDir(s.LayersDir())
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if keep[e.Name()] {
			continue
		}
		os.Remove(filepath.Join(s.dir, "layerinfo", e.Name()+".json"))
		if err := removeAll(filepath.Join(s.LayersDir(), e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	// Aliases of layers gone go with them.
	aliases, _ := filepath.Glob(filepath.Join(s.dir, "layerinfo", "*.alias"))
	for _, a := range aliases {
		b, _ := os.ReadFile(a)
		if !keep[strings.TrimPrefix(strings.TrimSpace(string(b)), "sha256:")] {
			os.Remove(a)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(s.dir, "tmp")); err == nil {
		for _, e := range ents {
			removeAll(filepath.Join(s.dir, "tmp", e.Name()))
		}
	}
	return errors.Join(errs...)
}

// removeAll is os.RemoveAll that first makes directories writable: a
// layer may hold read-only ones, which a rootless owner cannot empty.
func removeAll(path string) error {
	err := os.RemoveAll(path)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

// lock takes the store's writer lock; the returned func releases it.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "lock"), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("template store lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("template store lock: %w", err)
	}
	return func() { f.Close() }, nil
}

func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}
