package manager

import (
	"context"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// PoolSpec asks for Size sandboxes of one kind kept ready: a template, a
// flavor, and how they are made (NoKernel, Ephemeral, as the creates
// they are for ask). A create claims only a sandbox of its own kind.
type PoolSpec struct {
	Template string
	Flavor   string
	Size     int
	// NoKernel sandboxes start no Python kernel as they boot, for creates
	// with CreateRequest.NoKernel (hosted MCP servers).
	NoKernel bool
	// Ephemeral sandboxes die with the process that made them, for
	// ephemeral creates; only that process claims them, so such a pool
	// is kept with Warm, never in Options.Pools.
	Ephemeral bool
	// RefillDelay is how long the pool waits after a take before it
	// refills; default 50ms.
	RefillDelay time.Duration
}

// poolKind is what, besides its template and flavor, a pool sandbox was
// made for. Its record carries it in Metadata[poolKindKey] (nothing for
// the plain kind), so every process sharing the store tells kinds apart.
type poolKind struct{ noKernel, ephemeral bool }

const poolKindKey = "mcpbox.pool"

func (k poolKind) String() string {
	switch {
	case k.noKernel && k.ephemeral:
		return "ephemeral+no-kernel"
	case k.noKernel:
		return "no-kernel"
	case k.ephemeral:
		return "ephemeral"
	}
	return ""
}

func kindOf(req CreateRequest) poolKind {
	return poolKind{noKernel: req.NoKernel, ephemeral: req.Ephemeral}
}

// pool is one kind of sandbox to keep filled. Its sandboxes are records
// in the store, state pooled and no owner: any process sharing the store
// may claim one (an ephemeral one: only its maker), and they count
// against MaxSessions, so a pool never pushes the server past its limit.
// The maintainer fills the configured pools; the process that asked
// fills a pool of Warm's.
type pool struct {
	spec   PoolSpec
	kind   poolKind
	flavor mcpbox.Flavor
	wake   chan struct{}
	python bool // its sandboxes start a Python kernel warm

	// A pool of Warm's: filled by this process, while users > 0
	// (under Manager.mu); stop ends its filling, done says it ended.
	local bool
	users int
	stop  context.CancelFunc
	done  chan struct{}
}

func poolKey(template, flavor string, k poolKind) string {
	return template + "\x00" + flavor + "\x00" + k.String()
}

// name is how PoolStats and the logs call p.
func (p *pool) name() string {
	n := p.spec.Template + "/" + p.spec.Flavor
	if k := p.kind.String(); k != "" {
		n += "/" + k
	}
	return n
}

// holds says whether r is a sandbox of p's, ready or being made.
func (m *Manager) holds(p *pool, r *mcpbox.Session) bool {
	return m.fits(r, p.spec.Template, p.spec.Flavor, p.kind)
}

// fits says whether pool record r is of the kind a create of (template,
// flavor, k) may claim here.
func (m *Manager) fits(r *mcpbox.Session, template, flavor string, k poolKind) bool {
	return r.Owner == "" && r.Template == template && r.Flavor.Name == flavor &&
		r.Metadata[poolKindKey] == k.String() && (!k.ephemeral || r.Holder == m.holder)
}

// newPool checks spec and returns its pool; nil when it is to be left
// out (no size, a template that does not exist).
func (m *Manager) newPool(spec PoolSpec) (*pool, error) {
	if spec.Size <= 0 {
		return nil, nil
	}
	fl, err := m.Flavor(spec.Flavor)
	if err != nil {
		return nil, err
	}
	spec.Flavor = fl.Name
	if spec.RefillDelay <= 0 {
		spec.RefillDelay = refillDelay
	}
	python, ok := m.poolTemplate(&spec)
	if !ok {
		return nil, nil
	}
	return &pool{spec: spec, kind: poolKind{noKernel: spec.NoKernel, ephemeral: spec.Ephemeral}, flavor: fl,
		wake: make(chan struct{}, 1), python: python && !spec.NoKernel}, nil
}

func (m *Manager) addPool(spec PoolSpec) error {
	if spec.Ephemeral {
		return mcpbox.Errorf(mcpbox.EINVALID, "pool %s/%s: an ephemeral pool is kept by the process that uses it (Manager.Warm), not configured", spec.Template, spec.Flavor)
	}
	p, err := m.newPool(spec)
	if err != nil || p == nil {
		return err
	}
	m.pools[poolKey(p.spec.Template, p.spec.Flavor, p.kind)] = p
	return nil
}

// Warm keeps spec.Size sandboxes of spec's kind ready for this process's
// creates until the returned release is called (or Close). This process
// fills the pool itself, maintainer or not, RefillDelay after each take.
// Warm of a pool already kept adds a user; the last release stops the
// pool and destroys its ready sandboxes. Hosted MCP servers keep their
// sandboxes warm this way. A template that does not exist is an error.
func (m *Manager) Warm(spec PoolSpec) (release func(), err error) {
	if spec.Size <= 0 {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "pool size %d: want at least 1", spec.Size)
	}
	if _, _, err := m.resolveTemplate(context.Background(), spec.Template); err != nil {
		return nil, err
	}
	p, err := m.newPool(spec)
	if err != nil {
		return nil, err
	}
	key := poolKey(p.spec.Template, p.spec.Flavor, p.kind)
	m.mu.Lock()
	if m.closedLocked() {
		m.mu.Unlock()
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "the manager is closed")
	}
	if cur := m.local[key]; cur != nil {
		p = cur
	} else {
		ctx, cancel := context.WithCancel(context.Background())
		p.local, p.stop, p.done = true, cancel, make(chan struct{})
		m.local[key] = p
		m.wg.Go(func() {
			defer close(p.done)
			m.keepFilled(ctx, p)
		})
	}
	p.users++
	m.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { m.unwarm(key, p) }) }, nil
}

// unwarm drops a user of local pool p; the last one stops it and
// destroys its ready sandboxes.
func (m *Manager) unwarm(key string, p *pool) {
	m.mu.Lock()
	p.users--
	last := p.users == 0 && m.local[key] == p
	if last {
		delete(m.local, key)
	}
	m.mu.Unlock()
	if !last {
		return
	}
	p.stop()
	<-p.done
	m.drain(context.Background(), func(r *mcpbox.Session) bool { return m.holds(p, r) })
}

// localPools returns the pools of Warm's.
func (m *Manager) localPools() []*pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pool, 0, len(m.local))
	for _, p := range m.local {
		out = append(out, p)
	}
	return out
}

// poolFor returns the pool a create of (template, flavor, k) takes from
// here, nil when none.
func (m *Manager) poolFor(template, flavor string, k poolKind) *pool {
	key := poolKey(template, flavor, k)
	if p := m.pools[key]; p != nil {
		return p
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.local[key]
}

// prestart is the kernel every sandbox starts as it boots, as a code
// interpreter's does: most sessions run Python first, and the interpreter
// then boots while the sandbox is still being set up.
var prestart = []mcpbox.Language{mcpbox.Python}

// refillDelay is how long a pool waits after a take before it refills.
const refillDelay = 50 * time.Millisecond

// claimWarm moves a ready pool sandbox of s's kind (its template, its
// flavor, k) to s's owner by compare-and-swap, and returns the session it
// became; nil when none was ready. The owner's limit is checked in the
// same write; the total does not change, so a full pool never blocks the
// creates it is there for.
func (m *Manager) claimWarm(ctx context.Context, s *mcpbox.Session, k poolKind) (*mcpbox.Session, error) {
	pooled, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		return nil, err
	}
	lim := m.admission()
	for _, p := range pooled {
		if !m.fits(p, s.Template, s.Flavor.Name, k) || p.Sandbox == nil {
			continue
		}
		claim := *s
		claim.ID, claim.Sandbox, claim.Revision = p.ID, p.Sandbox, p.Revision
		claim.State = mcpbox.SessionRunning
		err := m.opts.Store.UpdateSession(ctx, &claim, &lim)
		switch mcpbox.ErrorCode(err) {
		case "":
			m.wakePool(m.poolFor(s.Template, s.Flavor.Name, k))
			m.publish(mcpbox.EventCreated, &claim)
			m.log.Info("session created from a warm pool", "session", claim.ID, "owner", claim.Owner, "flavor", claim.Flavor.Name)
			return &claim, nil
		case mcpbox.ECONFLICT, mcpbox.ESESSION:
			continue // another caller took it first
		default:
			return nil, err
		}
	}
	return nil, nil
}

func (m *Manager) wakePool(p *pool) {
	if p != nil {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// refill keeps p at its size while this process is the maintainer (or
// p is its own, from Warm) and the global limit leaves room, one sandbox
// at a time. It runs at every maintenance tick and right after a take
// here.
func (m *Manager) refill(ctx context.Context, p *pool) {
	for ctx.Err() == nil && (p.local || m.isLeader()) {
		ready, err := m.poolCount(ctx, p)
		if err != nil || ready >= p.spec.Size {
			return
		}
		if err := m.fillOne(ctx, p); err != nil {
			if mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
				m.log.Warn("warm pool refill failed", "pool", p.name(), "err", err)
			}
			return
		}
	}
}

// poolCount counts p's sandboxes, ready or being made, by any process.
func (m *Manager) poolCount(ctx context.Context, p *pool) (int, error) {
	recs, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{Owner: "", States: []mcpbox.SessionState{mcpbox.SessionPooled, mcpbox.SessionCreating}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if m.holds(p, r) {
			n++
		}
	}
	return n, nil
}

// fillOne makes one pool sandbox: its record first (creating, no owner),
// then the sandbox, then the record becomes pooled.
func (m *Manager) fillOne(ctx context.Context, p *pool) error {
	if err := m.checkCapacity(ctx, p.flavor); err != nil {
		return err
	}
	now := m.opts.Now().UTC()
	rec := &mcpbox.Session{ID: mcpbox.NewID(), State: mcpbox.SessionCreating, Template: p.spec.Template,
		Flavor: p.flavor, Volumes: m.volumes, Created: now, LastUsed: now, Holder: m.holder}
	if k := p.kind.String(); k != "" {
		rec.Metadata = map[string]string{poolKindKey: k}
	}
	if err := m.opts.Store.CreateSession(ctx, rec, mcpbox.Admission{MaxTotal: m.opts.MaxSessions}); err != nil {
		return err
	}
	sb, err := m.opts.Runtime.Create(ctx, mcpbox.SandboxSpec{ID: rec.ID, Flavor: p.flavor, Template: p.spec.Template,
		Volumes: m.volumes, Prestart: kernels(CreateRequest{NoKernel: p.kind.noKernel}), Ephemeral: p.kind.ephemeral})
	switch {
	case err == nil && p.python:
		// A warm sandbox has its default Python context running.
		tr := m.newConn(rec.ID).transport
		err = m.opts.WarmKernel(ctx, tr)
		tr.CloseIdleConnections()
		if err != nil {
			m.opts.Runtime.Destroy(context.WithoutCancel(ctx), rec.ID)
		}
	case err == nil && p.kind.noKernel:
		// A new agent's first process start costs a few times what
		// later ones do: it is made here, with a process that exits at
		// once, not by the claimer's server. A template without /bin/sh
		// only loses that.
		c := m.newConn(rec.ID)
		if _, werr := c.client.Run(ctx, agentclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "exit 0"}}, nil, nil); werr != nil {
			m.log.Debug("warm pool: first process start", "pool", p.name(), "err", werr)
		}
		c.transport.CloseIdleConnections()
	}
	if err != nil {
		m.opts.Store.DeleteSession(context.WithoutCancel(ctx), rec.ID)
		return err
	}
	rec.Sandbox, rec.State = sb, mcpbox.SessionPooled
	if err := m.opts.Store.UpdateSession(ctx, rec, nil); err != nil {
		m.opts.Runtime.Destroy(context.WithoutCancel(ctx), rec.ID)
		m.opts.Store.DeleteSession(context.WithoutCancel(ctx), rec.ID)
		return err
	}
	return nil
}

// runPools refills each configured pool when woken: by a take here, and
// at every maintenance tick (takes by other processes; see Run).
func (m *Manager) runPools(ctx context.Context) {
	for _, p := range m.pools {
		m.wg.Go(func() { m.keepFilled(ctx, p) })
	}
}

// localRefillEvery is how often a pool of Warm's looks at itself
// unwoken (Run's tick does it for the configured ones): a sandbox of it
// given way at the limit comes back once there is room.
const localRefillEvery = 5 * time.Second

// keepFilled refills p now and whenever woken, until ctx ends.
func (m *Manager) keepFilled(ctx context.Context, p *pool) {
	var tick <-chan time.Time
	if p.local {
		t := time.NewTicker(localRefillEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		m.refill(ctx, p)
		select {
		case <-ctx.Done():
			return
		case <-m.stop:
			return
		case <-tick:
		case <-p.wake:
			// The request that took a sandbox is about to run its
			// first code in it; making the next one now would take
			// the CPU from it. Takes within the delay are refilled
			// together.
			select {
			case <-ctx.Done():
				return
			case <-m.stop:
				return
			case <-time.After(p.spec.RefillDelay):
			}
		}
	}
}

// PoolStats reports how many sandboxes each pool holds ready, by
// "template/flavor", plus "/kind" for a pool of another kind than the
// plain one ("/ephemeral+no-kernel": hosted servers').
func (m *Manager) PoolStats() map[string]int {
	out := map[string]int{}
	for _, p := range m.pools {
		out[p.name()] = 0
	}
	for _, p := range m.localPools() {
		out[p.name()] = 0
	}
	recs, err := m.opts.Store.ListSessions(context.Background(), mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		return out
	}
	for _, r := range recs {
		n := r.Template + "/" + r.Flavor.Name
		if k := r.Metadata[poolKindKey]; k != "" {
			n += "/" + k
		}
		out[n]++
	}
	return out
}

// drainPools destroys the pools' ready sandboxes this process made (when
// the maintainer stops: the next one refills them).
func (m *Manager) drainPools(ctx context.Context) {
	m.drain(ctx, func(*mcpbox.Session) bool { return true })
}

// drain destroys the ready pool sandboxes this process made that match
// says to.
func (m *Manager) drain(ctx context.Context, match func(*mcpbox.Session) bool) {
	recs, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Holder != m.holder || r.Owner != "" || !match(r) {
			continue
		}
		m.destroyPooled(ctx, r)
	}
}

// destroyPooled destroys ready pool sandbox r unless it was claimed
// meanwhile; it says whether it did.
func (m *Manager) destroyPooled(ctx context.Context, r *mcpbox.Session) bool {
	r.State = mcpbox.SessionStopping
	if m.opts.Store.UpdateSession(ctx, r, nil) != nil {
		return false // claimed meanwhile
	}
	m.opts.Runtime.Destroy(context.WithoutCancel(ctx), r.ID)
	m.opts.Store.DeleteSession(context.WithoutCancel(ctx), r.ID)
	return true
}

// warmed finishes a session claimed from a pool.
func (m *Manager) warmed(warm *mcpbox.Session) *mcpbox.Session {
	if warm != nil {
		m.pushDeadline(warm)
		m.adopt(warm.ID) // its maker may not be the one looking after it now
	}
	return warm
}

// poolWait bounds how long a create at the limit waits for a pool
// sandbox of its kind that is still being made.
const poolWait = 30 * time.Second

// roomFromPools is what a create does when the store refused its record
// for the global limit (refused) while pools hold some of that limit.
// A pool sandbox of s's kind (k) that is still being made is waited for
// and claimed (when warmOK); a ready pool sandbox of another kind that
// this process holds is destroyed to make room, and s's record is
// written. It returns the claimed session, or nil once s's record is in
// the store; refused when the pools hold nothing that could give way.
func (m *Manager) roomFromPools(ctx context.Context, s *mcpbox.Session, k poolKind, warmOK bool, refused error) (*mcpbox.Session, error) {
	deadline := time.Now().Add(poolWait)
	for time.Now().Before(deadline) {
		if warmOK {
			if warm, err := m.claimWarm(ctx, s, k); err != nil || warm != nil {
				return warm, err
			}
		}
		recs, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled, mcpbox.SessionCreating}})
		if err != nil {
			return nil, err
		}
		coming, evicted := false, false
		for _, r := range recs {
			if r.Owner != "" {
				continue
			}
			switch {
			case warmOK && m.fits(r, s.Template, s.Flavor.Name, k):
				coming = true // ready or nearly: claim it next round
			case r.State == mcpbox.SessionPooled && r.Holder == m.holder && !evicted:
				evicted = m.destroyPooled(ctx, r)
			}
		}
		if evicted {
			err := m.opts.Store.CreateSession(ctx, s, m.admission())
			if mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
				return nil, err
			}
			continue // another create took the room first
		}
		if !coming {
			return nil, refused
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, refused
}
