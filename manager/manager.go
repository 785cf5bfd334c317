// Package manager is the session manager every protocol adapter goes
// through: it creates sessions on a runtime, keeps their records in a
// Store, enforces owners and limits, expires idle and old sessions, and
// tells subscribers what happened.
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
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Options configure a Manager. Runtime and Store are required.
type Options struct {
	Runtime mcpbox.Runtime
	Store   mcpbox.Store
	// MaxSessions caps live sessions in total; default 100.
	MaxSessions int
	// MaxSessionsPerOwner caps one owner's live sessions; default 20.
	MaxSessionsPerOwner int
	// MaxConcurrentExecutions caps executions at once in one session;
	// default 4.
	MaxConcurrentExecutions int
	// DefaultIdleTimeout ends a session unused this long; default 15m.
	DefaultIdleTimeout time.Duration
	// DefaultTTL is a session's life when the caller names none; default 1h.
	DefaultTTL time.Duration
	// MaxTTL caps any TTL a caller asks for; default 24h.
	MaxTTL time.Duration
	// Flavors adds custom flavors to the built-in ones.
	Flavors map[string]mcpbox.Flavor
	// HostCPUs and HostMemoryBytes are what the host can give; a flavor
	// asking for more is refused. Zero means unchecked.
	HostCPUs        float64
	HostMemoryBytes int64
	// VolumeRoots are the host directories volumes may come from.
	VolumeRoots []string
	// Volumes are mapped into every session (from the config).
	Volumes []mcpbox.Volume
	// Pools are the warm pools to keep filled.
	Pools []PoolSpec
	// WarmKernel readies a pool sandbox's default Python context; nil
	// uses the agent (WarmPython). Tests with a fake runtime set a no-op.
	WarmKernel func(context.Context, *mcpbox.Sandbox) error
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

	mu sync.Mutex
	// live counts sessions that hold a sandbox, by owner; kept in memory
	// so limits are checked without a store round trip.
	live    map[string]int
	pending map[string]int // sessions on their way, counted against the limits too
	subs    map[chan mcpbox.Event]struct{}
	pools   map[string]*pool

	connMu sync.Mutex
	conns  map[string]*sessionConn // by session id
	// ended holds sessions this manager ended in the last endedTTL, by
	// when: a call that read the record just before the end must not
	// bring their connection back.
	ended map[string]time.Time

	bgMu sync.Mutex
	bg   map[string]*background // by handle
}

// New returns a Manager. It loads the live sessions' owners from the store
// so limits hold across restarts.
func New(ctx context.Context, opts *Options) (*Manager, error) {
	if opts == nil || opts.Runtime == nil || opts.Store == nil {
		return nil, fmt.Errorf("manager: a Runtime and a Store are required")
	}
	o := *opts
	setDefault(&o.MaxSessions, 100)
	setDefault(&o.MaxSessionsPerOwner, 20)
	setDefault(&o.MaxConcurrentExecutions, 4)
	setDefault(&o.DefaultIdleTimeout, 15*time.Minute)
	setDefault(&o.DefaultTTL, time.Hour)
	setDefault(&o.MaxTTL, 24*time.Hour)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.WarmKernel == nil {
		o.WarmKernel = WarmPython
	}
	m := &Manager{opts: o, flavors: maps.Clone(mcpbox.Flavors), live: map[string]int{}, pending: map[string]int{}, pools: map[string]*pool{}, conns: map[string]*sessionConn{}, ended: map[string]time.Time{}, bg: map[string]*background{}, subs: map[chan mcpbox.Event]struct{}{}}
	for _, v := range o.Volumes {
		if err := m.checkVolume(v); err != nil {
			return nil, err
		}
	}
	for name, f := range o.Flavors {
		f.Name = name
		if err := f.Validate(); err != nil {
			return nil, err
		}
		m.flavors[name] = f
	}
	m.log = o.Logger
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	live, err := o.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}})
	if err != nil {
		return nil, err
	}
	for _, s := range live {
		m.live[s.Owner]++
	}
	return m, nil
}

// StartPools starts filling the warm pools of Options.Pools. Call it after
// Recover, which would otherwise take pool sandboxes for orphans.
func (m *Manager) StartPools(ctx context.Context) error { return m.startPools(ctx, m.opts.Pools) }

// Close destroys the warm pools' idle sandboxes. Sessions are left alone.
func (m *Manager) Close(ctx context.Context) { m.drainPools(ctx) }

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
	TTL         time.Duration // 0: DefaultTTL
	IdleTimeout time.Duration // 0: DefaultIdleTimeout
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

// Create starts a session for owner.
func (m *Manager) Create(ctx context.Context, owner string, req CreateRequest) (*mcpbox.Session, error) {
	if owner == "" {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "a session needs an owner")
	}
	fl, err := m.Flavor(req.Flavor)
	if err != nil {
		return nil, err
	}
	// Only the host template exists so far; naming it is allowed.
	if req.Template == "default" {
		req.Template = ""
	}
	if req.Template != "" {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "unknown template %q", req.Template).
			WithSuggestion("leave template out, or use \"default\"")
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
	vols, err := m.volumesFor(req.Volumes)
	if err != nil {
		return nil, err
	}
	// A warm sandbox has only the configured volumes.
	warm, err := m.reserve(owner, req.Template, fl.Name, len(req.Volumes) == 0)
	if err != nil {
		return nil, err
	}
	now := m.opts.Now().UTC()
	s := &mcpbox.Session{
		ID: mcpbox.NewID(), Owner: owner, State: mcpbox.SessionCreating, Template: req.Template,
		Flavor: fl, Env: req.Env, Metadata: req.Metadata, Volumes: vols,
		Created: now, LastUsed: now, ExpiresAt: now.Add(ttl), IdleTimeout: idle,
	}
	// A warm sandbox becomes the session: its id is the sandbox's. The
	// caller's env is applied to every process the session starts.
	sb := warm
	if sb != nil {
		s.ID = sb.ID
	} else {
		sb, err = m.opts.Runtime.Create(ctx, mcpbox.SandboxSpec{ID: s.ID, Flavor: fl, Env: req.Env, Volumes: vols, Prestart: prestart})
	}
	if err != nil {
		m.release(owner, false)
		if mcpbox.ErrorCode(err) == mcpbox.EINTERNAL {
			err = mcpbox.Errorf(mcpbox.ECREATE, "create sandbox").Wrap(err)
		}
		return nil, err
	}
	s.Sandbox = sb
	s.State = mcpbox.SessionRunning
	if err := m.opts.Store.PutSession(ctx, s); err != nil {
		m.opts.Runtime.Destroy(context.WithoutCancel(ctx), s.ID)
		m.release(owner, false)
		return nil, err
	}
	m.release(owner, true)
	m.publish(mcpbox.EventCreated, s)
	m.log.Info("session created", "session", s.ID, "owner", owner, "flavor", fl.Name)
	return s, nil
}

// reserve counts a session on its way against the limits. When a warm
// sandbox of the right kind is ready it moves it, under the same lock,
// from its pool to the session: the total does not change, so a full pool
// never blocks the creates it is there for.
func (m *Manager) reserve(owner, template, flavor string, warmOK bool) (*mcpbox.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.live[owner] + m.pending[owner]; n >= m.opts.MaxSessionsPerOwner {
		return nil, mcpbox.Errorf(mcpbox.ELIMIT, "owner %q has its maximum of %d sessions", owner, m.opts.MaxSessionsPerOwner).
			With("limit", m.opts.MaxSessionsPerOwner).With("current", n).
			WithSuggestion("stop one of your sessions (stop_session) or reuse one by its session_id")
	}
	var sb *mcpbox.Sandbox
	if warmOK {
		sb = m.takeWarmLocked(template, flavor)
	}
	if sb == nil {
		if total := m.totalLocked(); total >= m.opts.MaxSessions {
			return nil, mcpbox.Errorf(mcpbox.ELIMIT, "the server runs its maximum of %d sessions", m.opts.MaxSessions).
				With("limit", m.opts.MaxSessions).With("current", total).
				WithSuggestion("stop a session you no longer need, or try again later")
		}
	}
	m.pending[owner]++
	return sb, nil
}

// totalLocked counts live sessions, sessions on their way and pool
// sandboxes, ready or filling.
func (m *Manager) totalLocked() int {
	total := 0
	for _, n := range m.live {
		total += n
	}
	for _, n := range m.pending {
		total += n
	}
	for _, p := range m.pools {
		total += len(p.ready) + p.filling
	}
	return total
}

// release ends a reservation; made says whether it became a live session.
func (m *Manager) release(owner string, made bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending[owner]--; m.pending[owner] <= 0 {
		delete(m.pending, owner)
	}
	if made {
		m.live[owner]++
	}
}
