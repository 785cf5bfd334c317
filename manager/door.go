package manager

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// sessionConn is what the manager keeps per live session: a transport to
// its agent (built on Runtime.Dial), a typed client over it, the slots that
// cap concurrent executions, and the session's record as last read.
type sessionConn struct {
	transport *http.Transport
	client    *agentclient.Client
	slots     chan struct{}
	calls     atomic.Int64

	// session and checked are the record and when it was read, under
	// Manager.connMu. A call within recordTTL of the read uses it as is.
	session *mcpbox.Session
	checked time.Time
}

// recordTTL is how long a session record read from the store serves calls
// without reading it again. Touch skips its write for the same second, so
// a busy session costs one store round trip a second, not one per call.
// Ending a session here drops the record at once; one ended by another
// mcpbox process on the same store is noticed within this time, and a
// call in between fails on the sandbox being gone.
const recordTTL = time.Second

// Agent is the door to owner's session id: it checks ownership, records
// the use, counts the call, and returns a RoundTripper whose requests
// reach the session's agent (any path of the envd and code interpreter
// API). The RoundTripper is shared by the session's calls; callers do not
// close it. A session that is not owner's, or has ended, is
// SESSION_NOT_FOUND.
func (m *Manager) Agent(ctx context.Context, owner, id string) (http.RoundTripper, error) {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return c.transport, nil
}

// Calls returns how many calls went through the door to session id in
// this process (0 for one it has no connection to).
func (m *Manager) Calls(id string) int64 {
	m.connMu.Lock()
	defer m.connMu.Unlock()
	if c := m.conns[id]; c != nil {
		return c.calls.Load()
	}
	return 0
}

// conn returns owner's running session and its connection, after
// recording the use and counting the call.
func (m *Manager) conn(ctx context.Context, owner, id string) (*mcpbox.Session, *sessionConn, error) {
	now := m.opts.Now()
	m.connMu.Lock()
	if c := m.conns[id]; c != nil && c.session != nil && c.session.Owner == owner && now.Sub(c.checked) < recordTTL {
		s := c.session
		m.connMu.Unlock()
		c.calls.Add(1)
		return s, c, nil
	}
	m.connMu.Unlock()
	s, wrote, err := m.touch(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	m.connMu.Lock()
	if _, gone := m.ended[id]; gone {
		m.connMu.Unlock()
		// Stopped here between the read and now.
		return nil, nil, mcpbox.Errorf(mcpbox.ESESSION, "session %q has stopped", id).WithSuggestion("create a new session")
	}
	c := m.conns[id]
	if c == nil {
		c = m.newConn(id)
		m.conns[id] = c
	}
	// The record is shared by the calls that follow: they read it only.
	c.session, c.checked = s, now
	m.connMu.Unlock()
	c.calls.Add(1)
	if wrote {
		m.pushDeadline(s)
	}
	return s, c, nil
}

func (m *Manager) newConn(id string) *sessionConn {
	tr := agentclient.NewTransport(func(ctx context.Context) (net.Conn, error) {
		c, err := m.opts.Runtime.Dial(ctx, id)
		if err != nil && ctx.Err() == nil {
			if gone := m.sandboxGone(ctx, id); gone != nil {
				return nil, gone
			}
		}
		return c, err
	})
	return &sessionConn{transport: tr, client: agentclient.New(tr), slots: make(chan struct{}, m.opts.MaxConcurrentExecutions)}
}

// sandboxGone runs when a sandbox's agent cannot be reached. When the
// runtime says the sandbox is no longer alive (killed, crashed, out of
// memory), its session ends at once — stopped, its leftovers destroyed —
// instead of failing every later call until its deadline, and the error
// says so. It returns nil when the sandbox is alive (a passing fault).
func (m *Manager) sandboxGone(ctx context.Context, id string) error {
	list, err := m.opts.Runtime.List(ctx)
	if err != nil {
		return nil
	}
	for _, sb := range list {
		if sb.ID == id && sb.Alive {
			return nil
		}
	}
	died := mcpbox.Errorf(mcpbox.ESESSION, "session %q has ended: its sandbox stopped running (killed or crashed), and its state is lost", id).
		With("session_id", id).WithSuggestion("create a new session and run the setup code again")
	s, err := m.opts.Store.GetSession(ctx, id)
	if err != nil {
		return nil
	}
	m.connMu.Lock()
	first := m.died[id]
	if first == nil && s.State == mcpbox.SessionRunning {
		m.died[id] = &death{at: m.opts.Now(), ended: make(chan struct{})}
	}
	mine := m.died[id]
	m.connMu.Unlock()
	if first != nil {
		// A call at the same moment found it dead first and is ending
		// it: this one waits for that, and says the same.
		select {
		case <-first.ended:
		case <-ctx.Done():
		}
		return died
	}
	if mine == nil {
		return nil // not running: ended some other way
	}
	m.log.Warn("a session's sandbox stopped running; ending the session", "session", id, "owner", s.Owner)
	if err := m.end(context.WithoutCancel(ctx), s, mcpbox.SessionStopped); err != nil {
		m.log.Warn("end a session whose sandbox died", "session", id, "err", err)
	}
	close(mine.ended)
	return died
}

// death is a session whose sandbox a call here found dead.
type death struct {
	at    time.Time
	ended chan struct{} // closed once the session has ended
}

// endedTTL is how long an ended session is remembered against a call
// that read its record before the end (a store round trip; far less).
const endedTTL = time.Minute

// dropConn forgets a session's connection when it ends.
func (m *Manager) dropConn(id string) {
	now := m.opts.Now()
	m.connMu.Lock()
	if c := m.conns[id]; c != nil {
		c.transport.CloseIdleConnections()
		delete(m.conns, id)
	}
	for old, at := range m.ended {
		if now.Sub(at) > endedTTL {
			delete(m.ended, old)
		}
	}
	for old, d := range m.died {
		if now.Sub(d.at) > endedTTL {
			delete(m.died, old)
		}
	}
	m.ended[id] = now
	m.connMu.Unlock()
}

// acquire takes an execution slot, or fails at once when all are busy.
func (m *Manager) acquire(id string, c *sessionConn) (func(), error) {
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	default:
		return nil, mcpbox.Errorf(mcpbox.ELIMIT, "session %s already runs its maximum of %d executions at once", id, cap(c.slots)).
			With("limit", cap(c.slots)).With("session_id", id).
			WithSuggestion("wait for a running execution to finish, or use another session")
	}
}

// deadlineGrace is how long past its recorded deadline a sandbox waits
// for a manager to end it (and record why) before it ends itself.
const deadlineGrace = 30 * time.Second

// pushDeadline tells s's sandbox when to end itself if no manager ends it
// first: a sandbox must not outlive its session because every mcpbox
// process that could reap it has gone. It does not wait for the answer.
func (m *Manager) pushDeadline(s *mcpbox.Session) {
	d := s.Deadline()
	if d.IsZero() {
		return
	}
	m.connMu.Lock()
	c := m.conns[s.ID]
	if c == nil {
		c = m.newConn(s.ID)
		m.conns[s.ID] = c
	}
	m.connMu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.client.SetDeadline(ctx, d.Add(deadlineGrace)); err != nil {
			m.log.Debug("push sandbox deadline", "session", s.ID, "err", err)
		}
	}()
}
