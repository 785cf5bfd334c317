package manager

import (
	"context"
	"time"

	"github.com/mcpbox/mcpbox"
)

// leaderLease is the lease of the one process that maintains a store:
// it reaps, takes over what dead processes left, and fills the pools.
const leaderLease = "maintainer"

func processLease(holder string) string { return "process/" + holder }

// renewLease takes or renews this process's own lease.
func (m *Manager) renewLease(ctx context.Context) error {
	_, err := m.opts.Store.AcquireLease(ctx, processLease(m.holder), m.holder, m.opts.LeaseTTL)
	return err
}

func (m *Manager) isLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

// reapEvery is how often the maintainer looks for sessions past their
// deadline.
const reapEvery = 5 * time.Second

// Run keeps this process's lease until ctx ends or Close is called, and
// competes for the maintainer lease: while it holds it, it recovers what
// processes whose lease expired left behind, reaps sessions past their
// deadline and keeps the pools filled. Every process sharing a store runs
// it; one at a time maintains, and another takes over within LeaseTTL of
// its death. Close waits for it to return.
func (m *Manager) Run(ctx context.Context) {
	// Under mu, as Warm: Close either sees this Run in wg, or Run sees
	// the stop and does nothing.
	m.mu.Lock()
	if m.closedLocked() {
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(m.opts.LeaseTTL / 3)
	defer tick.Stop()
	poolsStarted := false
	var lastReap, lastRecover time.Time
	for {
		if err := m.renewLease(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("renew process lease", "err", err)
		}
		lead, err := m.opts.Store.AcquireLease(ctx, leaderLease, m.holder, m.opts.LeaseTTL)
		if err != nil && ctx.Err() == nil {
			m.log.Warn("maintainer lease", "err", err)
		}
		m.mu.Lock()
		was := m.leader
		m.leader = lead
		m.mu.Unlock()
		if lead && !was {
			m.log.Info("this process maintains the store", "holder", m.holder)
			lastRecover = time.Time{}
		}
		if lead {
			now := time.Now()
			if now.Sub(lastRecover) >= m.opts.LeaseTTL {
				if _, err := m.Recover(ctx); err != nil && ctx.Err() == nil {
					m.log.Warn("recover", "err", err)
				}
				lastRecover = now
			}
			if now.Sub(lastReap) >= reapEvery {
				if _, err := m.Reap(ctx); err != nil && ctx.Err() == nil {
					m.log.Warn("reaper", "err", err)
				}
				lastReap = now
			}
			if !poolsStarted {
				m.runPools(ctx)
				poolsStarted = true
			}
			// Takes by other processes are noticed here.
			for _, p := range m.pools {
				select {
				case p.wake <- struct{}{}:
				default:
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Close stops Run and waits for it to return, destroys the pool sandboxes
// this process made, and gives up its leases so another process takes
// over at once. Sessions are left alone: they outlive the process that
// made them.
func (m *Manager) Close(ctx context.Context) {
	// Under mu: a Warm either sees the stop or has its filling counted
	// in wg before it.
	m.mu.Lock()
	if m.closedLocked() {
		m.mu.Unlock()
		return
	}
	close(m.stop)
	local := m.local
	m.local = map[string]*pool{}
	m.mu.Unlock()
	for _, p := range local {
		p.stop() // a sandbox being made for it is not waited for
	}
	m.wg.Wait()
	if m.isLeader() {
		m.drainPools(ctx)
	}
	// The pools of Warm's are this process's whoever maintains.
	for _, p := range local {
		m.drain(ctx, func(r *mcpbox.Session) bool { return m.holds(p, r) })
	}
	m.opts.Store.ReleaseLease(ctx, leaderLease, m.holder)
	m.opts.Store.ReleaseLease(ctx, processLease(m.holder), m.holder)
	m.connMu.Lock()
	for _, c := range m.conns {
		c.transport.CloseIdleConnections()
	}
	m.connMu.Unlock()
}

// closedLocked reports whether Close has begun. Callers hold mu, so that
// what they add to wg after it said no is waited for by Close.
func (m *Manager) closedLocked() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}
