package template

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpbox/mcpbox"
)

// BuildOptions describe a Debian build.
type BuildOptions struct {
	// Packages are installed on top of a minimal system (and a recipe's).
	Packages []string
	// Suite is the Debian suite; default this machine's
	// (VERSION_CODENAME in /etc/os-release).
	Suite string
	// Mirror is the apt mirror's URL; default the first of this
	// machine's apt sources that carries Suite.
	Mirror string
	// Tool is "mmdebstrap" or "debootstrap"; default the first found.
	Tool string
}

var pkgPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,100}$`)

// RecipeNames lists the built-in recipes, sorted.
func RecipeNames() []string {
	var out []string
	for n := range Recipes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Build makes template name from Debian packages: a minimal system from
// the suite's mirror plus o.Packages (and, when name is a built-in
// recipe, the recipe's packages and files), as one layer. Progress lines
// are the tool's own, as it downloads and unpacks.
func (s *Store) Build(ctx context.Context, name string, o *BuildOptions, progress Progress) (*mcpbox.Template, error) {
	if o == nil {
		o = &BuildOptions{}
	}
	name = Canonical(name)
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if name == mcpbox.HostTemplate {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "%q is the host template; choose another name", name)
	}
	recipe, isRecipe := Recipes[name]
	pkgs := append(append([]string{}, recipe.Packages...), o.Packages...)
	for _, p := range pkgs {
		if !pkgPattern.MatchString(p) {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "invalid Debian package name %q", p)
		}
	}
	suite, mirror, err := aptSource(o.Suite, o.Mirror)
	if err != nil {
		return nil, err
	}
	tool := o.Tool
	if tool == "" {
		for _, t := range []string{"mmdebstrap", "debootstrap"} {
			if _, err := exec.LookPath(t); err == nil {
				tool = t
				break
			}
		}
	}
	if tool == "" {
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "building a Debian template needs mmdebstrap or debootstrap, and neither is installed").
			WithSuggestion("apt-get install mmdebstrap")
	}
	if tool != "mmdebstrap" && tool != "debootstrap" {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "unknown build tool %q: use mmdebstrap or debootstrap", tool)
	}
	tmp, err := s.tmpDir()
	if err != nil {
		return nil, err
	}
	defer removeAll(tmp)
	for path, content := range recipe.Files {
		if err := os.MkdirAll(filepath.Join(tmp, "files", filepath.Dir(path)), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tmp, "files", path), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	progress.say("building %s with %s: Debian %s from %s, packages: %s", name, tool, suite, mirror, strings.Join(pkgs, " "))
	start := time.Now()

	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	budget := s.maxBytes
	var digest string
	var st applyStats
	if tool == "mmdebstrap" {
		digest, st, err = s.mmdebstrap(ctx, suite, mirror, pkgs, recipe, tmp, &budget, progress)
	} else {
		digest, st, err = s.debootstrap(ctx, suite, mirror, pkgs, recipe, tmp, &budget, progress)
	}
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "build %s: %v", name, err)
	}
	t := &mcpbox.Template{Name: name, Layers: []string{digest}, Source: "debian:" + suite, Created: time.Now().UTC(),
		Env: map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}}
	if isRecipe {
		t.Source = "recipe:" + name + " (debian:" + suite + ")"
		maps(t.Env, recipe.Env)
	}
	s.detect(t)
	if err := s.save(t); err != nil {
		return nil, err
	}
	progress.say("template %s: %.1f MB, languages %v, built in %s", name, float64(st.bytes)/1e6, t.Languages, time.Since(start).Round(time.Second))
	return t, nil
}

func maps(dst, src map[string]string) {
	for k, v := range src {
		dst[k] = v
	}
}

// mmdebstrap writes the root filesystem as a tar stream on its stdout,
// which becomes the layer as it comes.
func (s *Store) mmdebstrap(ctx context.Context, suite, mirror string, pkgs []string, r Recipe, tmp string, budget *int64, progress Progress) (string, applyStats, error) {
	// Recommends stay out: they would bring a compiler with pip.
	args := []string{"--variant=minbase", "--format=tar", "--verbose", `--aptopt=APT::Install-Recommends "false"`}
	prog := "mmdebstrap"
	if s.rootless {
		args = append(args, "--mode=unshare")
	} else {
		// As root it mounts /proc and /sys in its chroot: in a mount
		// namespace of its own, they go when it goes, however it ends.
		args = append([]string{"--mount", "--propagation", "private", "mmdebstrap", "--mode=root"}, args...)
		prog = "unshare"
	}
	if len(pkgs) > 0 {
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	for path := range r.Files {
		args = append(args, "--customize-hook=upload "+filepath.Join(tmp, "files", path)+" /"+path)
	}
	args = append(args, r.Hooks...)
	args = append(args, suite, "-", mirror)
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Cancelled: the whole group goes (apt and dpkg under it too).
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", applyStats{}, err
	}
	tail, wait := relay(cmd, progress)
	if err := cmd.Start(); err != nil {
		return "", applyStats{}, fmt.Errorf("start mmdebstrap: %w", err)
	}
	digest, st, aerr := s.addLayer("", func() (io.ReadCloser, error) { return io.NopCloser(stdout), nil }, nil, budget)
	if aerr != nil {
		cmd.Process.Kill()
	}
	io.Copy(io.Discard, stdout)
	wait()
	if err := cmd.Wait(); err != nil {
		return "", st, fmt.Errorf("mmdebstrap: %v: %s", err, tail())
	}
	return digest, st, aerr
}

// debootstrap builds in a directory, which is then read as a layer.
func (s *Store) debootstrap(ctx context.Context, suite, mirror string, pkgs []string, r Recipe, tmp string, budget *int64, progress Progress) (string, applyStats, error) {
	if s.rootless {
		return "", applyStats{}, errors.New("debootstrap needs root; mmdebstrap builds without it")
	}
	root := filepath.Join(tmp, "root")
	args := []string{"--variant=minbase"}
	if len(pkgs) > 0 {
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	args = append(args, suite, root, mirror)
	// In a mount namespace of its own, like mmdebstrap (which see).
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "debootstrap"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	tail, wait := relay(cmd, progress)
	cmd.Stdout = cmd.Stderr
	if err := cmd.Run(); err != nil {
		wait()
		return "", applyStats{}, fmt.Errorf("debootstrap: %v: %s", err, tail())
	}
	wait()
	for path, content := range r.Files {
		p := filepath.Join(root, path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", applyStats{}, err
		}
	}
	for _, d := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		if ents, err := os.ReadDir(filepath.Join(root, d)); err == nil {
			for _, e := range ents {
				if !e.IsDir() {
					os.Remove(filepath.Join(root, d, e.Name()))
				}
			}
		}
	}
	// The tree is the host's (owners as Debian made them): read it
	// without unmapping.
	host := *s
	host.rootless, host.uidBase = false, 0
	return s.addLayer("", func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(host.writeTarIDs(ctx, pw, root, func(id int) int { return id })) }()
		return pr, nil
	}, nil, budget)
}

// relay sends cmd's stderr to progress line by line and keeps its last
// lines for an error message.
func relay(cmd *exec.Cmd, progress Progress) (tail func() string, wait func()) {
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	var mu sync.Mutex
	var last []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			progress.say("%s", line)
			mu.Lock()
			if last = append(last, line); len(last) > 8 {
				last = last[1:]
			}
			mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	return func() string {
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(last, " | ")
		}, func() {
			pw.Close()
			<-done
		}
}

// aptSource picks the suite and mirror: the ones given, else this
// machine's own (its os-release, its apt sources).
func aptSource(suite, mirror string) (string, string, error) {
	if suite == "" {
		b, _ := os.ReadFile("/etc/os-release")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok {
				suite = strings.Trim(v, `"`)
			}
		}
	}
	if suite == "" || !pkgPattern.MatchString(suite) {
		return "", "", mcpbox.Errorf(mcpbox.EINVALID, "no Debian suite: this machine's /etc/os-release names none").
			WithSuggestion("give one with --suite (bookworm, trixie, …)")
	}
	if mirror == "" {
		mirror = mirrorFor(suite)
	}
	if mirror == "" {
		return "", "", mcpbox.Errorf(mcpbox.EINVALID, "no apt mirror for %s in this machine's apt sources", suite).
			WithSuggestion("give one with --mirror URL")
	}
	if !strings.HasPrefix(mirror, "http://") && !strings.HasPrefix(mirror, "https://") && !strings.HasPrefix(mirror, "file:/") {
		return "", "", mcpbox.Errorf(mcpbox.EINVALID, "mirror %q is not an http, https or file URL", mirror)
	}
	return suite, mirror, nil
}

// mirrorFor finds suite's mirror in /etc/apt/sources.list and the
// one-line and deb822 files of sources.list.d.
func mirrorFor(suite string) string {
	files := []string{"/etc/apt/sources.list"}
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	files = append(files, more...)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			fields := strings.Fields(l)
			if len(fields) < 3 || fields[0] != "deb" {
				continue
			}
			fields = fields[1:]
			if strings.HasPrefix(fields[0], "[") {
				for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
					fields = fields[1:]
				}
				if len(fields) > 0 {
					fields = fields[1:]
				}
			}
			if len(fields) >= 2 && fields[1] == suite {
				return fields[0]
			}
		}
	}
	sources, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range sources {
		b, _ := os.ReadFile(f)
		for _, stanza := range strings.Split(string(b), "\n\n") {
			var uris, suites []string
			for _, l := range strings.Split(stanza, "\n") {
				if v, ok := strings.CutPrefix(l, "URIs:"); ok {
					uris = strings.Fields(v)
				}
				if v, ok := strings.CutPrefix(l, "Suites:"); ok {
					suites = strings.Fields(v)
				}
			}
			if len(uris) > 0 && slices.Contains(suites, suite) {
				return uris[0]
			}
		}
	}
	return ""
}
