package manager

import (
	"context"
	"errors"
	"time"

	"github.com/mcpbox/mcpbox"
)

// RecoverReport says what Recover found.
type RecoverReport struct {
	// Adopted sessions had a live agent and carry on as they were, now
	// looked after by this process.
	Adopted []string
	// Ended sessions had lost their sandbox, or were past their deadline;
	// they are now stopped or expired.
	Ended []string
	// Orphans were sandboxes no live lease covers and no session needs:
	// half-made ones, pool sandboxes of a dead process, ones without a
	// record. They are destroyed.
	Orphans []string
}

// Recover looks after what no live lease covers: it re-adopts running
// sessions whose agent still answers (their kernels and files intact),
// ends the ones whose sandbox died or whose deadline passed, and destroys
// sandboxes nobody needs — leaving no processes, mounts, cgroups or
// directories behind. A record whose holder's lease is live is never
// touched: that process may be creating its sandbox this very moment. Run
// calls it while this process is the maintainer; serve also calls it once
// at start.
func (m *Manager) Recover(ctx context.Context) (*RecoverReport, error) {
	sandboxes, err := m.opts.Runtime.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*mcpbox.Sandbox{}
	for _, sb := range sandboxes {
		byID[sb.ID] = sb
	}
	all, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{})
	if err != nil {
		return nil, err
	}
	rep := &RecoverReport{}
	covered := map[string]bool{} // by holder, asked once per pass
	now := m.opts.Now()
	var errs []error
	for _, s := range all {
		sb := byID[s.ID]
		if s.State.Live() {
			delete(byID, s.ID)
		} else {
			continue // ended: a sandbox still there is an orphan
		}
		live, ok := covered[s.Holder]
		if !ok {
			live = m.leaseLive(ctx, s.Holder)
			covered[s.Holder] = live
		}
		if live {
			continue
		}
		// Take the record over first: of two processes recovering at
		// once, one wins and the other leaves it.
		s.Holder = m.holder
		if err := m.opts.Store.UpdateSession(ctx, s, nil); err != nil {
			if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
				errs = append(errs, err)
			}
			continue
		}
		if err := m.recoverOne(ctx, s, sb, now, rep); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range byID {
		if err := m.opts.Runtime.Destroy(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Orphans = append(rep.Orphans, id)
	}
	if len(rep.Adopted)+len(rep.Ended)+len(rep.Orphans) > 0 {
		m.log.Info("recovered sessions", "adopted", len(rep.Adopted), "ended", len(rep.Ended), "orphans", len(rep.Orphans))
	}
	return rep, errors.Join(errs...)
}

// leaseLive reports whether holder's process lease is unexpired. This
// process's own is live by definition. Leases are judged by the wall
// clock, as the store keeps them, whatever Options.Now says.
func (m *Manager) leaseLive(ctx context.Context, holder string) bool {
	if holder == m.holder {
		return true
	}
	if holder == "" || holderDead(holder) {
		return false
	}
	h, exp, err := m.opts.Store.Lease(ctx, processLease(holder))
	if err != nil {
		return true // unsure: leave it for the next pass
	}
	return h == holder && time.Now().Before(exp)
}

// recoverOne deals with one record this process just took over.
func (m *Manager) recoverOne(ctx context.Context, s *mcpbox.Session, sb *mcpbox.Sandbox, now time.Time, rep *RecoverReport) error {
	switch s.State {
	case mcpbox.SessionRunning:
		if d := s.Deadline(); !d.IsZero() && !now.Before(d) {
			rep.Ended = append(rep.Ended, s.ID)
			return m.end(ctx, s, mcpbox.SessionExpired)
		}
		if sb != nil && sb.Alive && m.alive(ctx, s.ID) {
			rep.Adopted = append(rep.Adopted, s.ID)
			m.pushDeadline(s)
			m.adopt(s.ID)
			return nil
		}
		rep.Ended = append(rep.Ended, s.ID)
		return m.end(ctx, s, mcpbox.SessionStopped)
	case mcpbox.SessionPaused:
		// Frozen, so its agent cannot answer: the runtime's word is all.
		if sb != nil && sb.Alive {
			rep.Adopted = append(rep.Adopted, s.ID)
			m.adopt(s.ID)
			return nil
		}
		rep.Ended = append(rep.Ended, s.ID)
		return m.end(ctx, s, mcpbox.SessionStopped)
	case mcpbox.SessionStopping:
		rep.Ended = append(rep.Ended, s.ID)
		return m.finish(ctx, s, mcpbox.SessionStopped)
	default: // creating, pooled: nobody's session yet
		rep.Orphans = append(rep.Orphans, s.ID)
		if err := m.opts.Runtime.Destroy(ctx, s.ID); err != nil {
			return err
		}
		return m.opts.Store.DeleteSession(ctx, s.ID)
	}
}

// alive asks a sandbox's agent for /health, briefly.
func (m *Manager) alive(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c := m.newConn(id)
	defer c.transport.CloseIdleConnections()
	return c.client.Health(ctx) == nil
}
