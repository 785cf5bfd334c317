package manager

import (
	"context"

	"github.com/mcpbox/mcpbox"
)

// Egress is the egress proxy as the manager sees it (egress.Proxy is
// one). The proxy asks the manager for a session's policy at every
// request (Manager.EgressPolicy); the manager tells it when a policy
// changed and reads its counters.
type Egress interface {
	// Stats returns a session's counters as this process's proxy saw them.
	Stats(session string) mcpbox.NetworkStats
	// PolicyChanged drops what was admitted under the old policy and is
	// idle (kept-alive upstream connections).
	PolicyChanged(session string)
}

// networkFor is the policy a new session gets: the request's, or the
// configured default, normalized; nil when it reaches nothing.
func (m *Manager) networkFor(p *mcpbox.NetworkPolicy) (*mcpbox.NetworkPolicy, error) {
	if p == nil {
		p = m.opts.DefaultNetwork
	}
	n, err := p.Normalize()
	if err != nil {
		return nil, err
	}
	if n == nil || (n.None() && len(n.Deny) == 0) {
		return nil, nil
	}
	if !n.None() && m.opts.Egress == nil {
		return nil, mcpbox.Errorf(mcpbox.EUNSUPPORTED, "network access (%s) needs the egress proxy, which this mcpbox was started without: sandboxes have no network", n).
			WithSuggestion("leave network out, or run mcpbox serve or mcpbox mcp, which start the egress proxy")
	}
	return n, nil
}

// SetNetwork replaces the network policy of owner's running session (E2B's
// PUT /sandboxes/{id}/network). It applies to the session's next
// connection; open ones carry on. A nil policy takes all network away.
func (m *Manager) SetNetwork(ctx context.Context, owner, id string, p *mcpbox.NetworkPolicy) (*mcpbox.NetworkPolicy, error) {
	n, err := p.Normalize()
	if err != nil {
		return nil, err
	}
	if n != nil && n.None() && len(n.Deny) == 0 {
		n = nil
	}
	if !n.None() && m.opts.Egress == nil {
		return nil, mcpbox.Errorf(mcpbox.EUNSUPPORTED, "network access (%s) needs the egress proxy, which this mcpbox was started without", n).
			WithSuggestion("run mcpbox serve or mcpbox mcp, which start the egress proxy")
	}
	for try := 0; ; try++ {
		s, err := m.Get(ctx, owner, id)
		if err != nil {
			return nil, err
		}
		if s.State != mcpbox.SessionRunning {
			return nil, notRunning(s)
		}
		s.Network = n
		err = m.opts.Store.UpdateSession(ctx, s, nil)
		if err == nil {
			if m.opts.Egress != nil {
				m.opts.Egress.PolicyChanged(id)
			}
			m.log.Info("network policy changed", "session", id, "owner", owner, "network", n.String())
			return n, nil
		}
		if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT || try >= maxCASRetries {
			return nil, err
		}
	}
}

// EgressPolicy is the policy the egress proxy enforces for session id:
// the record's, read from the store, so a change made by any process
// sharing it applies to the next connection. A session that is not
// running reaches nothing.
func (m *Manager) EgressPolicy(ctx context.Context, id string) (*mcpbox.NetworkPolicy, error) {
	s, err := m.opts.Store.GetSession(ctx, id)
	if err != nil {
		if c := mcpbox.ErrorCode(err); c == mcpbox.ESESSION || c == mcpbox.ENOTFOUND {
			return nil, nil
		}
		return nil, err
	}
	if s.State != mcpbox.SessionRunning {
		return nil, nil
	}
	return s.Network, nil
}

// NetworkStats returns session id's egress counters as this process's
// proxy saw them (zero when another process serves its sandbox).
// Callers have already checked who owns the session.
func (m *Manager) NetworkStats(id string) mcpbox.NetworkStats {
	if m.opts.Egress == nil {
		return mcpbox.NetworkStats{}
	}
	return m.opts.Egress.Stats(id)
}

// adopt tells a runtime that keeps per-process state for its sandboxes
// (the local runtime's egress socket) that this process now looks after
// sandbox id. A failure costs the sandbox its network, not its life.
func (m *Manager) adopt(id string) {
	a, ok := m.opts.Runtime.(mcpbox.Adopter)
	if !ok {
		return
	}
	if err := a.Adopt(id); err != nil {
		m.log.Warn("adopt sandbox: its network may be unreachable", "session", id, "err", err)
	}
}
