package manager

import (
	"context"
	"time"

	"github.com/mcpbox/mcpbox"
)

// PoolSpec asks for Size sandboxes of one (template, flavor) kept ready.
type PoolSpec struct {
	Template string
	Flavor   string
	Size     int
}

// pool is one (template, flavor) to keep filled. Its sandboxes are
// records in the store, state pooled and no owner: any process sharing the
// store may claim one, and they count against MaxSessions, so a pool never
// pushes the server past its limit. Only the maintainer fills pools.
type pool struct {
	spec   PoolSpec
	flavor mcpbox.Flavor
	wake   chan struct{}
	python bool // its template has Python: its sandboxes start it warm
}

func poolKey(template, flavor string) string { return template + "\x00" + flavor }

func (m *Manager) addPool(spec PoolSpec) error {
	if spec.Size <= 0 {
		return nil
	}
	fl, err := m.Flavor(spec.Flavor)
	if err != nil {
		return err
	}
	spec.Flavor = fl.Name
	python, ok := m.poolTemplate(&spec)
	if !ok {
		return nil
	}
	m.pools[poolKey(spec.Template, spec.Flavor)] = &pool{spec: spec, flavor: fl, wake: make(chan struct{}, 1), python: python}
	return nil
}

// prestart is the kernel every sandbox starts as it boots, as a code
// interpreter's does: most sessions run Python first, and the interpreter
// then boots while the sandbox is still being set up.
var prestart = []mcpbox.Language{mcpbox.Python}

// refillDelay is how long a pool waits after a take before it refills.
const refillDelay = 50 * time.Millisecond

// claimWarm moves a ready pool sandbox of s's (template, flavor) to s's
// owner by compare-and-swap, and returns the session it became; nil when
// none was ready. The owner's limit is checked in the same write; the
// total does not change, so a full pool never blocks the creates it is
// there for.
func (m *Manager) claimWarm(ctx context.Context, s *mcpbox.Session) (*mcpbox.Session, error) {
	pooled, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		return nil, err
	}
	lim := m.admission()
	for _, p := range pooled {
		if p.Template != s.Template || p.Flavor.Name != s.Flavor.Name || p.Sandbox == nil {
			continue
		}
		claim := *s
		claim.ID, claim.Sandbox, claim.Revision = p.ID, p.Sandbox, p.Revision
		claim.State = mcpbox.SessionRunning
		err := m.opts.Store.UpdateSession(ctx, &claim, &lim)
		switch mcpbox.ErrorCode(err) {
		case "":
			m.wakePool(s.Template, s.Flavor.Name)
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

func (m *Manager) wakePool(template, flavor string) {
	if p := m.pools[poolKey(template, flavor)]; p != nil {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// refill keeps p at its size while this process is the maintainer and
// the global limit leaves room, one sandbox at a time. It runs at every
// maintenance tick and right after a take here.
func (m *Manager) refill(ctx context.Context, p *pool) {
	for ctx.Err() == nil && m.isLeader() {
		ready, err := m.poolCount(ctx, p)
		if err != nil || ready >= p.spec.Size {
			return
		}
		if err := m.fillOne(ctx, p); err != nil {
			if mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
				m.log.Warn("warm pool refill failed", "flavor", p.spec.Flavor, "err", err)
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
		if r.Owner == "" && r.Template == p.spec.Template && r.Flavor.Name == p.spec.Flavor {
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
	if err := m.opts.Store.CreateSession(ctx, rec, mcpbox.Admission{MaxTotal: m.opts.MaxSessions}); err != nil {
		return err
	}
	sb, err := m.opts.Runtime.Create(ctx, mcpbox.SandboxSpec{ID: rec.ID, Flavor: p.flavor, Template: p.spec.Template,
		Volumes: m.volumes, Prestart: prestart})
	if err == nil && p.python {
		// A warm sandbox has its default Python context running.
		tr := m.newConn(rec.ID).transport
		err = m.opts.WarmKernel(ctx, tr)
		tr.CloseIdleConnections()
		if err != nil {
			m.opts.Runtime.Destroy(context.WithoutCancel(ctx), rec.ID)
		}
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

// runPools refills each pool when woken: by a take here, and at every
// maintenance tick (takes by other processes; see Run).
func (m *Manager) runPools(ctx context.Context) {
	for _, p := range m.pools {
		m.wg.Go(func() {
			for {
				m.refill(ctx, p)
				select {
				case <-ctx.Done():
					return
				case <-p.wake:
					// The request that took a sandbox is about to run its
					// first code in it; making the next one now would take
					// the CPU from it. Takes within the delay are refilled
					// together.
					select {
					case <-ctx.Done():
						return
					case <-time.After(refillDelay):
					}
				}
			}
		})
	}
}

// PoolStats reports how many sandboxes each pool holds ready.
func (m *Manager) PoolStats() map[string]int {
	out := map[string]int{}
	for _, p := range m.pools {
		out[p.spec.Template+"/"+p.spec.Flavor] = 0
	}
	recs, err := m.opts.Store.ListSessions(context.Background(), mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		return out
	}
	for _, r := range recs {
		out[r.Template+"/"+r.Flavor.Name]++
	}
	return out
}

// drainPools destroys the pools' ready sandboxes (when the maintainer
// stops: the next one refills them).
func (m *Manager) drainPools(ctx context.Context) {
	recs, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Holder != m.holder {
			continue
		}
		r.State = mcpbox.SessionStopping
		if m.opts.Store.UpdateSession(ctx, r, nil) != nil {
			continue // claimed meanwhile
		}
		m.opts.Runtime.Destroy(ctx, r.ID)
		m.opts.Store.DeleteSession(ctx, r.ID)
	}
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
// A pool sandbox of s's kind that is still being made is waited for and
// claimed (when warmOK); a ready pool sandbox of another kind that this
// process holds is destroyed to make room, and s's record is written.
// It returns the claimed session, or nil once s's record is in the store;
// refused when the pools hold nothing that could give way.
func (m *Manager) roomFromPools(ctx context.Context, s *mcpbox.Session, warmOK bool, refused error) (*mcpbox.Session, error) {
	deadline := time.Now().Add(poolWait)
	for time.Now().Before(deadline) {
		if warmOK {
			if warm, err := m.claimWarm(ctx, s); err != nil || warm != nil {
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
			same := r.Template == s.Template && r.Flavor.Name == s.Flavor.Name
			switch {
			case same && warmOK:
				coming = true // ready or nearly: claim it next round
			case r.State == mcpbox.SessionPooled && r.Holder == m.holder && !evicted:
				r.State = mcpbox.SessionStopping
				if m.opts.Store.UpdateSession(ctx, r, nil) == nil {
					m.opts.Runtime.Destroy(context.WithoutCancel(ctx), r.ID)
					m.opts.Store.DeleteSession(context.WithoutCancel(ctx), r.ID)
					evicted = true
				}
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
