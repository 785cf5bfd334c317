// Package manager is the session manager every protocol adapter goes
// through: it creates sessions on a runtime, keeps their records in a
// Store, enforces owners and limits, expires idle and old sessions, keeps
// warm pools, and tells subscribers what happened.
//
// # One door
//
// Every byte that reaches a sandbox's agent goes through Agent (door.go):
// it checks ownership, records the use and counts the call, then hands
// back an http.RoundTripper built on Runtime.Dial. The typed operations
// (code, commands, files) are built on the same door; the E2B adapter
// forwards raw envd traffic through it.
//
// # One truth
//
// Several mcpbox processes may share one store (Claude Desktop and Cursor
// each start `mcpbox mcp` beside a `serve`). The store is the truth: every
// sandbox has a record from the moment it is being made, records change
// only by compare-and-swap, limits are checked in the same write that
// admits a record, and each record names the process (its Holder) whose
// lease covers it. One process at a time — the one holding the
// "maintainer" lease — reaps, fills the pools and takes over the records
// of processes whose lease expired (lease.go, recover.go).
//
// Ownership is absolute: an owner never sees, uses or learns of another
// owner's session. To them it does not exist, so every lookup of a session
// that is not theirs fails exactly as a missing one does (SESSION_NOT_FOUND,
// never "forbidden").
package manager

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Options configure a Manager. Runtime and Store are required.
type Options struct {
	Runtime mcpbox.Runtime
	Store   mcpbox.Store
	// Templates resolves template names; nil: only the host template
	// exists (see template.go).
	Templates mcpbox.TemplateCatalog
	// MaxSessions caps live sandboxes in total (pools included), across
	// every process sharing Store; default 100.
	MaxSessions int
	// MaxSessionsPerOwner caps one owner's live sessions; default 20.
	MaxSessionsPerOwner int
	// MaxConcurrentExecutions caps executions at once in one session;
	// default 4.
	MaxConcurrentExecutions int
	// MaxBackgroundCommands caps the background commands running at once
	// in one session; default 8.
	MaxBackgroundCommands int
	// MaxOutputBytes caps what a command's stdout and its stderr keep on
	// the host, each; default 1 MiB. The rest is counted and dropped.
	MaxOutputBytes int64
	// MaxFileBytes caps a file ReadFile returns; default 16 MiB.
	MaxFileBytes int64
	// MaxCodeReplyBytes caps the events of one code execution kept on the
	// host (results, images, output); default 64 MiB.
	MaxCodeReplyBytes int64
	// DefaultIdleTimeout ends a session unused this long; default 15m.
	DefaultIdleTimeout time.Duration
	// DefaultTTL is a session's life when the caller names none; default 1h.
	DefaultTTL time.Duration
	// MaxTTL caps any TTL a caller asks for; default 24h.
	MaxTTL time.Duration
	// Flavors adds custom flavors to the built-in ones.
	Flavors map[string]mcpbox.Flavor
	// HostCPUs and HostMemoryBytes are what the host can give. A flavor
	// asking for more is refused, and so is a sandbox that would take the
	// live sandboxes' memory (RAM and their in-memory disks) past
	// HostMemoryBytes × Overcommit. Zero means unchecked.
	HostCPUs        float64
	HostMemoryBytes int64
	// Overcommit is how many times the host's memory live sandboxes may
	// be promised in total; default 4 (most sandboxes use a small part of
	// their limit, and each is fenced by its own).
	Overcommit float64
	// VolumeRoots are the host directories volumes may come from.
	VolumeRoots []string
	// Volumes are mapped into every session (from the config). One that
	// fails its checks is reported in the log and left out, never fatal.
	Volumes []mcpbox.Volume
	// Pools are the warm pools to keep filled.
	Pools []PoolSpec
	// WarmKernel readies a pool sandbox's default Python context through
	// its agent; nil uses WarmPython. Tests set a no-op.
	WarmKernel func(context.Context, http.RoundTripper) error
	// Holder names this process in the store's leases; default its host,
	// pid and start time (see defaultHolder).
	Holder string
	// LeaseTTL is how long a process's lease lasts unrenewed; default 15s.
	// Its sandboxes are taken over this long after it dies.
	LeaseTTL time.Duration
	// Egress is the egress proxy sessions reach the network through;
	// nil: no session may have a network policy (network.go).
	Egress Egress
	// DefaultNetwork is the policy of a session created without one;
	// nil: no network.
	DefaultNetwork *mcpbox.NetworkPolicy
	// Now is the clock; default time.Now. Tests pass a fake.
	Now func() time.Time
	// Logger receives the manager's logs; nil discards them.
	Logger *slog.Logger
}

// Manager manages sessions. It is safe for concurrent use.
type Manager struct {
	opts    Options
	flavors map[string]mcpbox.Flavor
	log     *slog.Logger
	holder  string
	// volumes are the configured volumes that passed their checks.
	volumes []mcpbox.Volume

	mu    sync.Mutex
	subs  map[chan mcpbox.Event]struct{}
	pools map[string]*pool // configured; fixed after New
	local map[string]*pool // Warm's; under mu

	connMu sync.Mutex
	conns  map[string]*sessionConn // by session id
	// ended holds sessions this manager ended in the last endedTTL, by
	// when: a call that read the record just before the end must not
	// bring their connection back.
	ended map[string]time.Time
	// died holds sessions whose sandbox a call here found dead in the
	// last endedTTL: calls at the same moment all say so (sandboxGone).
	died map[string]*death

	leader bool // holds the maintainer lease; under mu
	stop   chan struct{}
	wg     sync.WaitGroup
}

// New returns a Manager and takes this process's lease in the store.
// Call Run to keep the lease and, when this process is the maintainer,
// reap, recover and fill the pools.
func New(ctx context.Context, opts *Options) (*Manager, error) {
	if opts == nil || opts.Runtime == nil || opts.Store == nil {
		return nil, fmt.Errorf("manager: a Runtime and a Store are required")
	}
	o := *opts
	setDefault(&o.MaxSessions, 100)
	setDefault(&o.MaxSessionsPerOwner, 20)
	setDefault(&o.MaxConcurrentExecutions, 4)
	setDefault(&o.MaxBackgroundCommands, 8)
	setDefault(&o.MaxOutputBytes, 1<<20)
	setDefault(&o.MaxFileBytes, 16<<20)
	setDefault(&o.MaxCodeReplyBytes, 64<<20)
	setDefault(&o.DefaultIdleTimeout, 15*time.Minute)
	setDefault(&o.DefaultTTL, time.Hour)
	setDefault(&o.MaxTTL, 24*time.Hour)
	setDefault(&o.Overcommit, 4)
	setDefault(&o.LeaseTTL, 15*time.Second)
	if o.Holder == "" {
		o.Holder = defaultHolder()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.WarmKernel == nil {
		o.WarmKernel = WarmPython
	}
	m := &Manager{opts: o, flavors: maps.Clone(mcpbox.Flavors), holder: o.Holder, pools: map[string]*pool{},
		local: map[string]*pool{}, conns: map[string]*sessionConn{}, ended: map[string]time.Time{}, died: map[string]*death{}, subs: map[chan mcpbox.Event]struct{}{},
		stop: make(chan struct{})}
	m.log = o.Logger
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	for name, f := range o.Flavors {
		f.Name = name
		if err := f.Validate(); err != nil {
			return nil, err
		}
		m.flavors[name] = f
	}
	// A bad volume in the config is the config's problem, not a reason
	// for the server not to start: it is reported and left out.
	for _, v := range o.Volumes {
		cv, err := m.checkVolume(v)
		if err != nil {
			m.log.Error("volume left out of every session", "volume", v.String(), "err", err)
			continue
		}
		m.volumes = append(m.volumes, cv)
	}
	if err := m.renewLease(ctx); err != nil {
		return nil, err
	}
	for _, spec := range o.Pools {
		if err := m.addPool(spec); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Holder returns the name this process holds its lease under.
func (m *Manager) Holder() string { return m.holder }

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// CreateRequest is what a caller may choose about a new session.
type CreateRequest struct {
	Template string
	Flavor   string
	Env      map[string]string
	Metadata map[string]string
	// Volumes are mapped in addition to the configured ones; each must lie
	// under Options.VolumeRoots.
	Volumes     []mcpbox.Volume
	Network     *mcpbox.NetworkPolicy
	TTL         time.Duration // 0: DefaultTTL
	IdleTimeout time.Duration // 0: DefaultIdleTimeout
	// Ephemeral sessions end with the process that made them (mcpbox
	// run): their sandbox is never left behind, even after a SIGKILL.
	Ephemeral bool
	// EnvInSandbox asks for Env in the sandbox's own environment, not
	// only added to each typed call: raw traffic through the door (E2B's
	// SDKs) reaches the agent as it is. A session with env then never
	// takes a warm sandbox, which has none.
	EnvInSandbox bool
	// AutoPause pauses the session at its deadline instead of ending it;
	// it needs a runtime that can pause (see Pauser).
	AutoPause bool
	// NoKernel leaves unstarted the Python kernel a sandbox starts as it
	// boots, for one that runs no code cells (a hosted MCP server): its
	// own start then has the CPU.
	NoKernel bool
}

// kernels is what a new sandbox starts as it boots.
func kernels(req CreateRequest) []mcpbox.Language {
	if req.NoKernel {
		return nil
	}
	return prestart
}

// Flavor resolves a flavor name against built-in and custom flavors and
// the host's capacity.
func (m *Manager) Flavor(name string) (mcpbox.Flavor, error) {
	if name == "" {
		name = mcpbox.DefaultFlavor
	}
	f, ok := m.flavors[name]
	if !ok {
		return mcpbox.Flavor{}, mcpbox.Errorf(mcpbox.EINVALID, "unknown flavor %q", name).
			WithSuggestion("use small, medium, large or a flavor from the config")
	}
	if (m.opts.HostCPUs > 0 && f.CPUs > m.opts.HostCPUs) || (m.opts.HostMemoryBytes > 0 && f.MemoryBytes > m.opts.HostMemoryBytes) {
		return mcpbox.Flavor{}, mcpbox.Errorf(mcpbox.ELIMIT, "flavor %q needs %g CPUs and %d MiB of memory; this host has %g CPUs and %d MiB",
			name, f.CPUs, f.MemoryBytes>>20, m.opts.HostCPUs, m.opts.HostMemoryBytes>>20).
			With("flavor", name).WithSuggestion("choose a smaller flavor")
	}
	return f, nil
}

// admission is the store's part of the limits.
func (m *Manager) admission() mcpbox.Admission {
	return mcpbox.Admission{MaxTotal: m.opts.MaxSessions, MaxPerOwner: m.opts.MaxSessionsPerOwner}
}

// promised is what a flavor takes from the host's memory: its RAM and
// its disk, which lives in memory (tmpfs) too.
func promised(f mcpbox.Flavor) int64 { return f.MemoryBytes + f.DiskBytes }

// checkCapacity refuses a new sandbox of fl when the live ones already
// promise what the host can give, times the overcommit ratio. The sum is
// read from the store, so it covers every process sharing it.
func (m *Manager) checkCapacity(ctx context.Context, fl mcpbox.Flavor) error {
	if m.opts.HostMemoryBytes <= 0 {
		return nil
	}
	live, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: mcpbox.LiveStates})
	if err != nil {
		return err
	}
	var sum int64
	for _, s := range live {
		sum += promised(s.Flavor)
	}
	limit := int64(float64(m.opts.HostMemoryBytes) * m.opts.Overcommit)
	if sum+promised(fl) > limit {
		return mcpbox.Errorf(mcpbox.ELIMIT, "the host cannot take another %q sandbox: live sandboxes are promised %d MiB of memory and disk, and a %s one needs %d MiB more, past the %d MiB this host allows (%d MiB × overcommit %g)",
			fl.Name, sum>>20, fl.Name, promised(fl)>>20, limit>>20, m.opts.HostMemoryBytes>>20, m.opts.Overcommit).
			With("promised_mib", sum>>20).With("limit_mib", limit>>20).
			WithSuggestion("stop sessions you no longer need, use a smaller flavor, or raise overcommit in the config")
	}
	return nil
}

// Create starts a session for owner: a warm sandbox from a pool when one
// fits, a new one otherwise.
func (m *Manager) Create(ctx context.Context, owner string, req CreateRequest) (*mcpbox.Session, error) {
	if owner == "" {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "a session needs an owner")
	}
	fl, err := m.Flavor(req.Flavor)
	if err != nil {
		return nil, err
	}
	if req.Template, _, err = m.resolveTemplate(ctx, req.Template); err != nil {
		return nil, err
	}
	if req.Network, err = m.networkFor(req.Network); err != nil {
		return nil, err
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = m.opts.DefaultTTL
	}
	if ttl < 0 || ttl > m.opts.MaxTTL {
		return nil, mcpbox.Errorf(mcpbox.ELIMIT, "ttl %s is outside 0..%s", ttl, m.opts.MaxTTL).
			With("ttl_seconds", ttl.Seconds()).With("max_ttl_seconds", m.opts.MaxTTL.Seconds()).
			WithSuggestion("ask for a ttl of at most " + m.opts.MaxTTL.String())
	}
	idle := req.IdleTimeout
	if idle == 0 {
		idle = m.opts.DefaultIdleTimeout
	}
	if idle < 0 {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "idle timeout %s is negative", idle)
	}
	vols, err := m.volumesFor(req.Volumes)
	if err != nil {
		return nil, err
	}
	now := m.opts.Now().UTC()
	s := &mcpbox.Session{
		ID: mcpbox.NewID(), Owner: owner, State: mcpbox.SessionCreating, Template: req.Template,
		Flavor: fl, Env: req.Env, Metadata: req.Metadata, Volumes: vols,
		Created: now, LastUsed: now, ExpiresAt: now.Add(ttl), IdleTimeout: idle, Holder: m.holder,
	}
	s.Network = req.Network
	if req.AutoPause {
		if _, err := m.pauser(); err != nil {
			return nil, err
		}
		s.AutoPause = true
	}
	// A warm sandbox has only the configured volumes. The caller's env is
	// applied to every process the session starts. Only a pool sandbox
	// of the create's kind fits (an ephemeral create: one this process
	// made, which dies with it).
	kind := kindOf(req)
	warmOK := len(req.Volumes) == 0 && !(req.EnvInSandbox && len(req.Env) > 0)
	if warmOK {
		if warm, err := m.claimWarm(ctx, s, kind); err != nil || warm != nil {
			return m.warmed(warm), err
		}
	}
	if err := m.checkCapacity(ctx, fl); err != nil {
		return nil, err
	}
	if err := m.opts.Store.CreateSession(ctx, s, m.admission()); err != nil {
		if mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
			return nil, err
		}
		// At the limit, pools give way to the creates they are there for.
		warm, rerr := m.roomFromPools(ctx, s, kind, warmOK, err)
		if rerr != nil || warm != nil {
			return m.warmed(warm), rerr
		}
	}
	sb, err := m.opts.Runtime.Create(ctx, mcpbox.SandboxSpec{ID: s.ID, Flavor: fl, Template: req.Template,
		Env: req.Env, Volumes: vols, Network: req.Network, Prestart: kernels(req), Ephemeral: req.Ephemeral})
	if err != nil {
		m.opts.Store.DeleteSession(context.WithoutCancel(ctx), s.ID)
		if mcpbox.ErrorCode(err) == mcpbox.EINTERNAL {
			err = mcpbox.Errorf(mcpbox.ECREATE, "create sandbox").Wrap(err)
		}
		return nil, err
	}
	s.Sandbox = sb
	s.State = mcpbox.SessionRunning
	if err := m.opts.Store.UpdateSession(ctx, s, nil); err != nil {
		m.opts.Runtime.Destroy(context.WithoutCancel(ctx), s.ID)
		m.opts.Store.DeleteSession(context.WithoutCancel(ctx), s.ID)
		return nil, err
	}
	m.pushDeadline(s)
	m.publish(mcpbox.EventCreated, s)
	m.log.Info("session created", "session", s.ID, "owner", owner, "flavor", fl.Name)
	return s, nil
}
