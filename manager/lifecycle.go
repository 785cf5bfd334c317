package manager

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Get returns owner's session id, or SESSION_NOT_FOUND: also when it
// belongs to someone else.
func (m *Manager) Get(ctx context.Context, owner, id string) (*mcpbox.Session, error) {
	if mcpbox.ValidateID(id) != nil {
		return nil, mcpbox.SessionNotFound(id)
	}
	s, err := m.opts.Store.GetSession(ctx, id)
	if err != nil {
		return nil, err
	}
	if s.Owner != owner || s.State == mcpbox.SessionPooled {
		return nil, mcpbox.SessionNotFound(id)
	}
	return s, nil
}

// List returns owner's sessions that f matches (f.Owner is overridden).
func (m *Manager) List(ctx context.Context, owner string, f mcpbox.SessionFilter) ([]*mcpbox.Session, error) {
	f.Owner = owner
	return m.opts.Store.ListSessions(ctx, f)
}

// Stop ends owner's session: its sandbox is destroyed and its record kept
// as stopped. Stopping a stopped session is not an error.
func (m *Manager) Stop(ctx context.Context, owner, id string) error {
	s, err := m.Get(ctx, owner, id)
	if err != nil {
		return err
	}
	return m.end(ctx, s, mcpbox.SessionStopped)
}

// maxCASRetries bounds how often an update re-reads a record another
// writer changed under it; each retry is one store round trip.
const maxCASRetries = 8

// end destroys s's sandbox and records its final state. The record moves
// to stopping by compare-and-swap first: whoever wins that ends the
// session, and a Touch that read it before can no longer write it back as
// running.
//
// Touches yield to an end: they give up after a few lost races, while an
// end retries until it wins or ctx ends.
func (m *Manager) end(ctx context.Context, s *mcpbox.Session, state mcpbox.SessionState) error {
	paused := false
	for {
		if s.State != mcpbox.SessionRunning && s.State != mcpbox.SessionPaused {
			return nil
		}
		paused = s.State == mcpbox.SessionPaused
		s.State = mcpbox.SessionStopping
		err := m.opts.Store.UpdateSession(ctx, s, nil)
		if err == nil {
			break
		}
		if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s, err = m.opts.Store.GetSession(ctx, s.ID); err != nil {
			return err
		}
	}
	if paused {
		m.thaw(ctx, s.ID)
	}
	return m.finish(ctx, s, state)
}

// finish destroys the sandbox of a record in stopping and records state.
func (m *Manager) finish(ctx context.Context, s *mcpbox.Session, state mcpbox.SessionState) error {
	m.dropConn(s.ID)
	if err := m.opts.Runtime.Destroy(context.WithoutCancel(ctx), s.ID); err != nil {
		return err
	}
	s.State = state
	if err := m.opts.Store.UpdateSession(context.WithoutCancel(ctx), s, nil); err != nil {
		return err
	}
	ev := mcpbox.EventStopped
	if state == mcpbox.SessionExpired {
		ev = mcpbox.EventExpired
	}
	m.publish(ev, s)
	m.log.Info("session ended", "session", s.ID, "owner", s.Owner, "state", string(state))
	return nil
}

// Touch records a use of owner's session, pushing back its idle timeout.
func (m *Manager) Touch(ctx context.Context, owner, id string) (*mcpbox.Session, error) {
	s, wrote, err := m.touch(ctx, owner, id)
	if err == nil && wrote {
		m.pushDeadline(s)
	}
	return s, err
}

// touch is Touch, and says whether it wrote the record.
func (m *Manager) touch(ctx context.Context, owner, id string) (*mcpbox.Session, bool, error) {
	for try := 0; ; try++ {
		s, err := m.Get(ctx, owner, id)
		if err != nil {
			return nil, false, err
		}
		if s.State != mcpbox.SessionRunning {
			return nil, false, notRunning(s)
		}
		now := m.opts.Now().UTC()
		// A use within a second of the recorded one changes no deadline that
		// matters; skipping the write takes a store round trip off every call.
		if now.Sub(s.LastUsed) < recordTTL {
			return s, false, nil
		}
		s.LastUsed = now
		err = m.opts.Store.UpdateSession(ctx, s, nil)
		if err == nil {
			return s, true, nil
		}
		if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT || try >= maxCASRetries {
			return nil, false, err
		}
	}
}

// SetTimeout makes owner's session expire d from now (E2B's
// POST /sandboxes/{id}/timeout), within MaxTTL.
func (m *Manager) SetTimeout(ctx context.Context, owner, id string, d time.Duration) error {
	if d <= 0 || d > m.opts.MaxTTL {
		return mcpbox.Errorf(mcpbox.ELIMIT, "timeout %s is outside 0..%s", d, m.opts.MaxTTL).
			With("max_ttl_seconds", m.opts.MaxTTL.Seconds())
	}
	for try := 0; ; try++ {
		s, err := m.Get(ctx, owner, id)
		if err != nil {
			return err
		}
		if s.State != mcpbox.SessionRunning {
			return notRunning(s)
		}
		now := m.opts.Now().UTC()
		s.LastUsed, s.ExpiresAt = now, now.Add(d)
		err = m.opts.Store.UpdateSession(ctx, s, nil)
		if err == nil {
			m.pushDeadline(s)
			return nil
		}
		if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT || try >= maxCASRetries {
			return err
		}
	}
}

// Reap stops every running session past its deadline (pauses it, when it
// asked for AutoPause) and returns how many it stopped or paused. The maintainer runs it (see Run); tests call it directly.
func (m *Manager) Reap(ctx context.Context) (int, error) {
	live, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning, mcpbox.SessionPaused}})
	if err != nil {
		return 0, err
	}
	now := m.opts.Now()
	n := 0
	var errs []error
	for _, s := range live {
		// A paused session's deadlines stand still (see Pause).
		if d := s.Deadline(); (s.State == mcpbox.SessionRunning && !d.IsZero() && !now.Before(d)) || m.pausedTooLong(s, now) {
			if s.State == mcpbox.SessionRunning && s.AutoPause {
				_, err := m.Pause(ctx, s.Owner, s.ID)
				if err == nil {
					n++
					continue
				}
				m.log.Warn("auto-pause a session at its deadline; ending it instead", "session", s.ID, "err", err)
			}
			if err := m.end(ctx, s, mcpbox.SessionExpired); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Subscribe returns a channel of lifecycle events and a function that ends
// the subscription. A subscriber that falls 64 events behind misses events
// rather than stalling the manager.
func (m *Manager) Subscribe() (<-chan mcpbox.Event, func()) {
	ch := make(chan mcpbox.Event, 64)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		if _, ok := m.subs[ch]; ok {
			delete(m.subs, ch)
			close(ch)
		}
		m.mu.Unlock()
	}
}

func (m *Manager) publish(t mcpbox.EventType, s *mcpbox.Session) {
	ev := mcpbox.Event{Type: t, Session: *s, Time: m.opts.Now().UTC()}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.subs {
		select {
		case ch <- ev:
		default:
			m.log.Warn("event subscriber is behind; dropping an event", "session", s.ID)
		}
	}
}

// StopAll stops every running session this process looks after — made
// here, or adopted — of every owner (for --stop-sessions-on-exit), and
// returns how many it stopped. Sessions another live mcpbox process on the
// same store looks after are its own to keep.
func (m *Manager) StopAll(ctx context.Context) (int, error) {
	all, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning, mcpbox.SessionPaused}})
	if err != nil {
		return 0, err
	}
	var live []*mcpbox.Session
	for _, s := range all {
		if s.Holder == m.holder || !m.leaseLive(ctx, s.Holder) {
			live = append(live, s)
		}
	}
	// A few at a time: tearing a sandbox down is mostly waiting on the
	// kernel, and a server stopping with dozens live should not take a
	// minute.
	errs := make([]error, len(live))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, s := range live {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = m.end(ctx, s, mcpbox.SessionStopped)
		})
	}
	wg.Wait()
	return len(live), errors.Join(errs...)
}

// LiveSessions counts the running sessions in the store, pools aside.
func (m *Manager) LiveSessions() int {
	live, err := m.opts.Store.ListSessions(context.Background(), mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}})
	if err != nil {
		return 0
	}
	return len(live)
}

// Ready reports whether the manager can serve: its store answers.
func (m *Manager) Ready(ctx context.Context) error {
	// An owner no one can have: the query runs, and matches nothing.
	_, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{Owner: "\x00ready"})
	return err
}

// notRunning is the error for a call to a session that is no longer (or
// not yet) running.
func notRunning(s *mcpbox.Session) *mcpbox.Error {
	state := map[mcpbox.SessionState]string{
		mcpbox.SessionStopped:  "has stopped",
		mcpbox.SessionExpired:  "has expired (its TTL or idle timeout passed)",
		mcpbox.SessionStopping: "is stopping",
		mcpbox.SessionCreating: "is still being created",
		mcpbox.SessionPaused:   "is paused (resume it with E2B's Sandbox.connect)",
	}[s.State]
	if state == "" {
		state = "is " + string(s.State)
	}
	return mcpbox.Errorf(mcpbox.ESESSION, "session %q %s", s.ID, state).
		With("session_id", s.ID).With("state", string(s.State)).
		WithSuggestion("create a new session")
}
