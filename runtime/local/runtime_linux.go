package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agent/kernel"
	"github.com/mcpbox/mcpbox/agent/process"
	"github.com/mcpbox/mcpbox/internal/linux/cgroup"
)

// Runtime runs sandboxes on this machine. It is safe for concurrent use.
type Runtime struct {
	home     string
	exe      string
	uidBase  int
	cgParent string
	rootless bool
	log      *slog.Logger
	// kernels is the host directory of precompiled kernel drivers bound
	// into every sandbox at sandboxKernels; empty when it could not be made.
	// py holds the directories some templates get instead (pydriver_linux.go).
	kernels string
	py      pyDrivers

	// eg is the egress proxy and the sandboxes this process serves.
	eg egressState

	oomWarn sync.Once // protectAgent's note, logged once
	tmpl    templates // the template store, opened on first use

	mu   sync.Mutex
	live map[string]*child // sandboxes this process started and must reap
}

var _ mcpbox.Runtime = (*Runtime)(nil)

// child is a sandbox agent started by this process: done closes once it
// has been reaped.
type child struct {
	pid  int
	done chan struct{}
}

// New returns a Runtime storing its state under opts.Home.
func New(opts *Options) (*Runtime, error) {
	if opts == nil {
		opts = &Options{}
	}
	r := &Runtime{
		home:     opts.Home,
		exe:      opts.Exe,
		uidBase:  opts.UIDBase,
		cgParent: opts.CgroupParent,
		rootless: os.Geteuid() != 0,
		log:      opts.Logger,
		live:     map[string]*child{},
	}
	r.py = pyDrivers{sem: make(chan struct{}, 1), ready: map[string]bool{}, busy: map[string]bool{}, failed: map[string]time.Time{}}
	r.eg.server = opts.Egress
	if r.home == "" {
		r.home = DefaultHome()
	}
	if r.exe == "" {
		r.exe = "/proc/self/exe"
	}
	if r.uidBase == 0 {
		r.uidBase = 100000
	}
	if r.cgParent == "" {
		r.cgParent = "mcpbox"
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if err := r.makePrivate(); err != nil {
		return nil, err
	}
	// Some per-user kernel limits are copied into each sandbox's user
	// namespace, as the cap of everything it creates there, from this
	// process's own. Unlimited here, each sandbox's own (lower) limits are
	// what bind, and sandboxes cannot starve each other through root's.
	// Raising them takes CAP_SYS_RESOURCE, which root in a container
	// often lacks: that is said once, quietly, not at every start.
	if !r.rootless {
		var capped []string
		for name, res := range map[string]int{"MSGQUEUE": unix.RLIMIT_MSGQUEUE,
			"SIGPENDING": unix.RLIMIT_SIGPENDING, "MEMLOCK": unix.RLIMIT_MEMLOCK} {
			rl := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
			if err := unix.Setrlimit(res, &rl); err != nil {
				capped = append(capped, name)
			}
		}
		if len(capped) > 0 {
			slices.Sort(capped)
			r.log.Info("per-user limits sandboxes inherit stay as they are (no CAP_SYS_RESOURCE)", "limits", capped)
		}
	}
	// The sandbox shares the host's /usr, so its python3 is found the same
	// way here. Without the precompiled driver kernels compile it at every
	// start: slower, not broken, so a failure is only a warning. Without
	// a python3 here the source is still written: templates compile it.
	py, _ := process.LookPath("python3", DefaultPath)
	dir := filepath.Join(r.home, "kernels")
	tag, err := kernel.WritePythonModule(dir, py)
	if err != nil {
		r.log.Warn("kernels will compile their driver at every start", "err", err)
	} else {
		r.kernels, r.py.hostTag = dir, tag
	}
	return r, nil
}

// Rootless reports whether sandboxes run without root: one mapped uid and
// no cgroup limits.
func (r *Runtime) Rootless() bool { return r.rootless }

// Home returns the state directory.
func (r *Runtime) Home() string { return r.home }

// makePrivate creates the state directory and its sessions directory, both
// private to this process's user (0700), and takes back what older
// versions left open to others (0711 homes and sandbox directories,
// which a sandbox's PID 1 once had to walk through; it is now handed
// what it needs, see the package doc).
func (r *Runtime) makePrivate() error {
	if err := os.MkdirAll(r.sessionsDir(), 0o700); err != nil {
		return fmt.Errorf("local runtime: create state directory: %w", err)
	}
	dirs := []string{r.home, r.sessionsDir()}
	if ents, err := os.ReadDir(r.sessionsDir()); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(r.sessionsDir(), e.Name()))
			}
		}
	}
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			if d == r.home || d == r.sessionsDir() {
				return fmt.Errorf("local runtime: %w", err)
			}
			continue // a sandbox destroyed meanwhile
		}
		if fi.Mode().Perm() == 0o700 {
			continue
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("local runtime: make %s private: %w", d, err)
		}
	}
	return nil
}

func (r *Runtime) sessionsDir() string         { return filepath.Join(r.home, "sessions") }
func (r *Runtime) dir(id string) string        { return filepath.Join(r.sessionsDir(), id) }
func (r *Runtime) cgroupName(id string) string { return r.cgParent + "/" + id }

// state is sandbox.json: what a later mcpbox process needs to find and
// destroy a sandbox it did not start.
type state struct {
	mcpbox.Sandbox
	// PID is the agent's process id as the host sees it.
	PID int `json:"pid"`
	// StartTime is the agent's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22): a pid alone may have been reused.
	StartTime uint64 `json:"start_time"`
	// Template is the template it was made from; "" for the host's.
	Template string `json:"template,omitempty"`
}

// Create starts a sandbox and returns once its agent answers /health.
func (r *Runtime) Create(ctx context.Context, spec mcpbox.SandboxSpec) (_ *mcpbox.Sandbox, err error) {
	if err := mcpbox.ValidateID(spec.ID); err != nil {
		return nil, err
	}
	if spec.Flavor.Name == "" {
		if spec.Flavor, err = mcpbox.LookupFlavor(""); err != nil {
			return nil, err
		}
	}
	if err := spec.Flavor.Validate(); err != nil {
		return nil, err
	}
	for _, v := range spec.Volumes {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	if err := r.checkNetwork(spec.Network); err != nil {
		return nil, err
	}
	for k := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "invalid environment variable name %q", k)
		}
	}
	fail := func(step string, err error) error {
		return mcpbox.Errorf(mcpbox.ECREATE, "create sandbox %s: %s", spec.ID, step).Wrap(err)
	}

	dir := r.dir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "sandbox %s already exists", spec.ID)
		}
		return nil, fail("mkdir", err)
	}
	var started *child
	var cg *cgroup.Group
	defer func() {
		if err != nil {
			r.teardown(spec.ID, started, cg)
		}
	}()

	// Cgroup directories take a few milliseconds on a busy host: make
	// them while the rest is prepared and the child starts.
	type cgResult struct {
		g   *cgroup.Group
		err error
	}
	cgc := make(chan cgResult, 1)
	if !r.rootless {
		go func() {
			g, err := cgroup.New(r.cgroupName(spec.ID), cgroup.Limits{
				CPUs: spec.Flavor.CPUs,
				// The sandbox's disk is a tmpfs: its pages are memory,
				// charged to this group. Its own size limit bounds them, so
				// a full disk says ENOSPC instead of starting the OOM
				// killer, and processes keep the flavor's whole memory.
				MemoryBytes: spec.Flavor.MemoryBytes + spec.Flavor.DiskBytes,
				Pids:        spec.Flavor.Pids,
			})
			cgc <- cgResult{g, err}
		}()
	}
	var cgOnce sync.Once
	var cgRes cgResult
	waitCgroup := func() cgResult {
		cgOnce.Do(func() { cgRes = <-cgc })
		return cgRes
	}
	defer func() {
		// On an early return the group may still be on its way; the
		// teardown deferred above then removes it.
		if !r.rootless {
			cg = waitCgroup().g
		}
	}()

	sockPath := filepath.Join(dir, "agent.sock")
	h, err := r.openHandoff(dir, sockPath)
	if err != nil {
		return nil, fail("prepare", err)
	}
	defer h.close()
	if err := r.prepareEgress(spec.ID, h); err != nil {
		return nil, fail("egress", err)
	}
	tmpl, err := r.openTemplate(spec.Template, h)
	if err != nil {
		return nil, err
	}
	kernels, buildDriver, err := r.kernelsFor(ctx, tmpl)
	if err != nil {
		return nil, fail("kernel drivers", err)
	}
	r.openKernels(h, kernels)
	cmd, uid := r.command(h)
	if spec.Ephemeral {
		// PID 1 dies with this process, and its pid namespace with it:
		// the spawner thread it is forked from lives as long as we do.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	err = spawnIn(h.scratch, cmd)
	h.closeChildEnds()
	if err != nil {
		return nil, fail("start agent (clone with new namespaces)", err)
	}
	started = &child{pid: cmd.Process.Pid, done: make(chan struct{})}
	r.mu.Lock()
	r.live[spec.ID] = started
	r.mu.Unlock()
	go func() {
		cmd.Wait()
		close(started.done)
		r.mu.Lock()
		if r.live[spec.ID] == started {
			delete(r.live, spec.ID)
		}
		r.mu.Unlock()
	}()

	if !r.rootless {
		r.protectAgent(started.pid)
		res := waitCgroup()
		cg = res.g
		if res.err != nil {
			return nil, fail("cgroups", res.err)
		}
		if err := cg.Add(started.pid); err != nil {
			return nil, fail("join cgroups", err)
		}
	}

	cfg := initConfig{ID: spec.ID, DiskBytes: spec.Flavor.DiskBytes, Pids: spec.Flavor.Pids,
		UID: uid, Env: spec.Env, Volumes: spec.Volumes, KernelsFD: h.kernels != nil}
	if r.rootless {
		cfg.KernelsDir = kernels
	}
	r.templateConfig(tmpl, h, &cfg)
	for _, l := range spec.Prestart {
		if tmpl == nil || tmpl.Has(l) {
			cfg.Prestart = append(cfg.Prestart, string(l))
		}
	}
	h.egressConfig(&cfg)
	if err := json.NewEncoder(h.cfgW).Encode(cfg); err != nil {
		return nil, fail("send config", err)
	}
	h.cfgW.Close()

	sb := &mcpbox.Sandbox{ID: spec.ID, Flavor: spec.Flavor, Created: time.Now().UTC(), Alive: true}
	// Record the sandbox while it sets itself up.
	stErr := make(chan error, 1)
	go func() {
		st := state{Sandbox: *sb, PID: started.pid, Template: cfg.Template}
		if ctx.Value(pyBuildCtx{}) != nil {
			// A kernel driver's build lasts a moment: it must not keep
			// the template from being removed (TemplateUsers).
			st.Template = ""
		}
		st.StartTime, _ = procStartTime(started.pid)
		stErr <- writeJSON(filepath.Join(dir, "sandbox.json"), st)
	}()
	err = waitReady(ctx, h.readyR, started.done)
	if serr := <-stErr; err == nil && serr != nil {
		return nil, fail("write sandbox.json", serr)
	}
	if err != nil {
		if tail := tailFile(filepath.Join(dir, "agent.log"), 2048); tail != "" {
			err = fmt.Errorf("%w (agent log: %s)", err, tail)
		}
		return nil, fail("sandbox setup", err)
	}
	if err := r.health(ctx, spec.ID); err != nil {
		return nil, fail("agent health check", err)
	}
	r.log.Debug("sandbox created", "session", spec.ID, "pid", started.pid)
	if buildDriver {
		r.startPyDriver(tmpl)
	}
	return sb, nil
}

// waitReady reads the child's readiness report, or notices that it died.
func waitReady(ctx context.Context, ready *os.File, died <-chan struct{}) error {
	type report struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	got := make(chan error, 1)
	go func() {
		var rep report
		line, err := bufio.NewReader(ready).ReadBytes('\n')
		switch {
		case len(line) == 0 && err != nil:
			got <- errors.New("the sandbox exited during setup")
		case json.Unmarshal(line, &rep) != nil:
			got <- fmt.Errorf("unreadable readiness report %q", line)
		case rep.Error != "":
			got <- errors.New(rep.Error)
		case !rep.OK:
			got <- errors.New("the sandbox did not report ready")
		default:
			got <- nil
		}
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		// Closing our end unblocks the reader once the child is killed.
		return ctx.Err()
	}
}

// Dial connects to the agent's socket of sandbox id. Any process sharing
// the home may: the socket is private to the home's owner (0600).
func (r *Runtime) Dial(ctx context.Context, id string) (net.Conn, error) {
	if err := mcpbox.ValidateID(id); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(r.dir(id), "agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: dial agent: %w", id, err)
	}
	return c, nil
}

// PID returns the host pid of sandbox id's agent, or 0 when it is not
// running (tests and doctor use it; nothing outside this package needs it).
func (r *Runtime) PID(id string) int {
	st, err := readState(filepath.Join(r.dir(id), "sandbox.json"))
	if err != nil {
		return 0
	}
	if !running(st.PID, st.StartTime) {
		return 0
	}
	return st.PID
}

// health asks sandbox id's agent for GET /health over a fresh connection.
func (r *Runtime) health(ctx context.Context, id string) error {
	c := &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return r.Dial(ctx, id) },
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET /health: %s", resp.Status)
	}
	return nil
}

// Destroy kills every process in the sandbox, removes its cgroups and its
// directory. It works for sandboxes started by an earlier mcpbox process,
// and for ones whose agent is already dead.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if err := mcpbox.ValidateID(id); err != nil {
		return err
	}
	r.mu.Lock()
	c := r.live[id]
	r.mu.Unlock()
	var cg *cgroup.Group
	if !r.rootless {
		if g, err := cgroup.Load(r.cgroupName(id)); err == nil {
			cg = g
		}
	}
	if c == nil {
		if st, err := readState(filepath.Join(r.dir(id), "sandbox.json")); err == nil && st.PID > 0 {
			if t, err := procStartTime(st.PID); err == nil && t == st.StartTime {
				c = &child{pid: st.PID}
			}
		}
	}
	return r.teardown(id, c, cg)
}

// teardown is Destroy's work: kill, reap, remove. Each step runs even when
// an earlier one failed; the first error is returned.
func (r *Runtime) teardown(id string, c *child, cg *cgroup.Group) error {
	var errs []error
	r.forgetEgress(id)
	// The cgroup's processes are killed beside PID 1, not after it: the
	// kernel tears a pid namespace down one task at a time, and thousands
	// of forking tasks (a fork bomb) outrun it while it does.
	cgKilled := make(chan error, 1)
	if cg != nil {
		go func() { cgKilled <- cg.Kill() }()
	}
	if c != nil {
		// Killing PID 1 of a pid namespace kills everything in it.
		if err := syscall.Kill(c.pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			errs = append(errs, fmt.Errorf("kill agent %d: %w", c.pid, err))
		}
		if c.done != nil {
			select {
			case <-c.done:
			case <-time.After(10 * time.Second):
				errs = append(errs, fmt.Errorf("agent %d did not exit", c.pid))
			}
		} else {
			waitGone(c.pid, 10*time.Second)
		}
	}
	if cg != nil {
		if err := <-cgKilled; err != nil {
			errs = append(errs, err)
		}
		if err := cg.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(r.dir(id)); err != nil {
		errs = append(errs, fmt.Errorf("remove sandbox directory: %w", err))
	}
	if len(errs) > 0 {
		return mcpbox.Errorf(mcpbox.EINTERNAL, "destroy sandbox %s", id).Wrap(errors.Join(errs...))
	}
	r.log.Debug("sandbox destroyed", "session", id)
	return nil
}

// List returns the sandboxes recorded under the state directory, live or
// not; Alive says whether the agent still runs.
func (r *Runtime) List(ctx context.Context) ([]*mcpbox.Sandbox, error) {
	ents, err := os.ReadDir(r.sessionsDir())
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []*mcpbox.Sandbox
	for _, e := range ents {
		st, err := readState(filepath.Join(r.sessionsDir(), e.Name(), "sandbox.json"))
		if err != nil {
			continue // being created, or left half-made: Destroy handles it
		}
		sb := st.Sandbox
		sb.Alive = running(st.PID, st.StartTime)
		out = append(out, &sb)
	}
	return out, nil
}

func readState(path string) (*state, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &st, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// running reports whether the agent recorded as pid, started at start,
// still runs. A zombie does not: an agent orphaned by an earlier mcpbox
// process belongs to the host's init, which may take its time reaping it
// (or never do), but nothing of the sandbox is left alive.
func running(pid int, start uint64) bool {
	t, err := procStartTime(pid)
	if err != nil || t != start {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// procStartTime reads field 22 of /proc/<pid>/stat.
func procStartTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// waitGone waits until pid has exited. A zombie counts as gone: an agent
// from an earlier mcpbox was reparented to the host's init, which reaps it
// when it pleases, but everything in its namespaces is dead already.
func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}
