package manager

import (
	"context"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Pauser is a runtime that can freeze every process of a sandbox, its
// agent included, and thaw them: E2B's pause and resume. The local
// runtime does it with the cgroup freezer.
type Pauser interface {
	// Pause freezes sandbox id and returns once it is frozen.
	Pause(ctx context.Context, id string) error
	// Resume thaws it. Resuming a sandbox that is not frozen is not an
	// error.
	Resume(ctx context.Context, id string) error
}

// MaxTTL is the longest life a session may be given (Options.MaxTTL).
func (m *Manager) MaxTTL() time.Duration { return m.opts.MaxTTL }

func (m *Manager) pauser() (Pauser, error) {
	p, ok := m.opts.Runtime.(Pauser)
	if !ok {
		return nil, mcpbox.Errorf(mcpbox.EUNSUPPORTED, "this runtime cannot pause sandboxes").
			WithSuggestion("keep the sandbox running, or kill it")
	}
	return p, nil
}

// Pause freezes owner's running session: its processes stop where they
// are, keeping their memory, and the time it stays paused does not count
// against its TTL or idle timeout. Calls through the door fail while it
// is paused; Resume brings it back. A paused session ends when it has
// been paused for MaxTTL.
func (m *Manager) Pause(ctx context.Context, owner, id string) (*mcpbox.Session, error) {
	p, err := m.pauser()
	if err != nil {
		return nil, err
	}
	var s *mcpbox.Session
	for try := 0; ; try++ {
		if s, err = m.Get(ctx, owner, id); err != nil {
			return nil, err
		}
		if s.State == mcpbox.SessionPaused {
			return s, mcpbox.Errorf(mcpbox.ECONFLICT, "session %q is already paused", id).With("session_id", id)
		}
		if s.State != mcpbox.SessionRunning {
			return nil, notRunning(s)
		}
		s.State, s.PausedAt = mcpbox.SessionPaused, m.opts.Now().UTC()
		err = m.opts.Store.UpdateSession(ctx, s, nil)
		if err == nil {
			break
		}
		if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT || try >= maxCASRetries {
			return nil, err
		}
	}
	m.forgetRecord(id)
	// A frozen sandbox must not end itself on its own deadline the moment
	// it is thawed: it gets none while paused, and a new one on resume.
	c := m.connFor(id)
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = c.client.SetDeadline(dctx, time.Time{})
	cancel()
	if err == nil {
		err = p.Pause(ctx, id)
	}
	if err != nil {
		// Back to running, as it was.
		if _, rerr := m.resume(context.WithoutCancel(ctx), owner, id, p); rerr != nil {
			m.log.Warn("undo a failed pause", "session", id, "err", rerr)
		}
		return nil, mcpbox.Errorf(mcpbox.EINTERNAL, "pause session %q", id).Wrap(err)
	}
	m.publish(mcpbox.EventStateChanged, s)
	m.log.Info("session paused", "session", id, "owner", owner)
	return s, nil
}

// Resume thaws owner's paused session. Its TTL and idle timeout are
// pushed back by the time it was paused.
func (m *Manager) Resume(ctx context.Context, owner, id string) (*mcpbox.Session, error) {
	p, err := m.pauser()
	if err != nil {
		return nil, err
	}
	s, err := m.Get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if s.State == mcpbox.SessionRunning {
		return s, mcpbox.Errorf(mcpbox.ECONFLICT, "session %q is already running", id).With("session_id", id)
	}
	if s.State != mcpbox.SessionPaused {
		return nil, notRunning(s)
	}
	s, err = m.resume(ctx, owner, id, p)
	if err != nil {
		return nil, err
	}
	m.publish(mcpbox.EventStateChanged, s)
	m.log.Info("session resumed", "session", id, "owner", owner)
	return s, nil
}

// resume thaws the sandbox, then records it running with its deadlines
// moved by the time it was paused.
func (m *Manager) resume(ctx context.Context, owner, id string, p Pauser) (*mcpbox.Session, error) {
	if err := p.Resume(ctx, id); err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINTERNAL, "resume session %q", id).Wrap(err)
	}
	for try := 0; ; try++ {
		s, err := m.Get(ctx, owner, id)
		if err != nil {
			return nil, err
		}
		if s.State == mcpbox.SessionRunning {
			return s, nil // a resume beside this one recorded it first
		}
		if s.State != mcpbox.SessionPaused {
			return nil, notRunning(s)
		}
		now := m.opts.Now().UTC()
		if !s.PausedAt.IsZero() {
			if !s.ExpiresAt.IsZero() {
				s.ExpiresAt = s.ExpiresAt.Add(now.Sub(s.PausedAt))
			}
			s.LastUsed = s.LastUsed.Add(now.Sub(s.PausedAt))
		}
		s.State, s.PausedAt = mcpbox.SessionRunning, time.Time{}
		err = m.opts.Store.UpdateSession(ctx, s, nil)
		if err == nil {
			m.forgetRecord(id)
			m.pushDeadline(s)
			return s, nil
		}
		if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT || try >= maxCASRetries {
			return nil, err
		}
	}
}

// thaw is called before a paused session's sandbox is destroyed: a
// process frozen by the v1 freezer dies of SIGKILL only once thawed.
func (m *Manager) thaw(ctx context.Context, id string) {
	if p, ok := m.opts.Runtime.(Pauser); ok {
		if err := p.Resume(ctx, id); err != nil {
			m.log.Debug("thaw before destroy", "session", id, "err", err)
		}
	}
}

// pausedTooLong reports whether a paused session has been paused for
// MaxTTL, after which it ends.
func (m *Manager) pausedTooLong(s *mcpbox.Session, now time.Time) bool {
	return s.State == mcpbox.SessionPaused && !s.PausedAt.IsZero() && now.Sub(s.PausedAt) >= m.opts.MaxTTL
}

// forgetRecord makes the next call through the door read id's record
// again instead of the one it kept (recordTTL): its state just changed.
func (m *Manager) forgetRecord(id string) {
	m.connMu.Lock()
	if c := m.conns[id]; c != nil {
		c.checked = time.Time{}
	}
	m.connMu.Unlock()
}

// connFor returns id's connection, made if need be, without a check.
func (m *Manager) connFor(id string) *sessionConn {
	m.connMu.Lock()
	defer m.connMu.Unlock()
	c := m.conns[id]
	if c == nil {
		c = m.newConn(id)
		m.conns[id] = c
	}
	return c
}
