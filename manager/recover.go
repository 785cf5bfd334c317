package manager

import (
	"context"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// RecoverReport says what Recover found.
type RecoverReport struct {
	// Adopted sessions had a live agent and carry on as they were.
	Adopted []string
	// Ended sessions had lost their sandbox; they are now stopped.
	Ended []string
	// Orphans were sandboxes without a session record, now destroyed.
	Orphans []string
}

// Recover runs at start: it re-adopts every running session whose agent
// still answers (its kernels and files intact), ends the ones whose
// sandbox died, and destroys sandboxes nobody has a record of, leaving no
// processes, mounts, cgroups or directories behind.
func (m *Manager) Recover(ctx context.Context) (*RecoverReport, error) {
	sandboxes, err := m.opts.Runtime.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*mcpbox.Sandbox{}
	for _, sb := range sandboxes {
		byID[sb.ID] = sb
	}
	running, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}})
	if err != nil {
		return nil, err
	}
	rep := &RecoverReport{}
	for _, s := range running {
		sb := byID[s.ID]
		delete(byID, s.ID)
		if sb != nil && alive(ctx, sb) {
			s.Sandbox = sb
			if err := m.opts.Store.PutSession(ctx, s); err != nil {
				return rep, err
			}
			rep.Adopted = append(rep.Adopted, s.ID)
			continue
		}
		if err := m.end(ctx, s, mcpbox.SessionStopped); err != nil {
			return rep, err
		}
		rep.Ended = append(rep.Ended, s.ID)
	}
	for id := range byID {
		if err := m.opts.Runtime.Destroy(ctx, id); err != nil {
			return rep, err
		}
		rep.Orphans = append(rep.Orphans, id)
	}
	m.log.Info("recovered sessions", "adopted", len(rep.Adopted), "ended", len(rep.Ended), "orphans", len(rep.Orphans))
	return rep, nil
}

// alive asks a sandbox's agent for /health, briefly.
func alive(ctx context.Context, sb *mcpbox.Sandbox) bool {
	if sb.PID == 0 && sb.Endpoint.Network == "unix" {
		return false // the runtime already knows its agent is gone
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c := agentclient.New(sb.Endpoint)
	defer c.Close()
	return c.Health(ctx) == nil
}
