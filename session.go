package mcpbox

import (
	"context"
	"time"
)

// LocalOwner owns what stdio clients and the CLI create.
const LocalOwner = "local"

// SessionState is where a session is in its life.
type SessionState string

// Session states. A record exists for every sandbox from the moment it is
// being made: pooled, creating, running and stopping records hold a
// sandbox (see LiveStates); stopped and expired ones are history.
const (
	// SessionPooled is a warm sandbox with no owner yet, waiting in a pool.
	SessionPooled   SessionState = "pooled"
	SessionCreating SessionState = "creating"
	SessionRunning  SessionState = "running"
	// SessionPaused is a sandbox whose processes are frozen (E2B's
	// pause): it keeps its memory and its deadline does not run.
	SessionPaused SessionState = "paused"
	// SessionStopping is a sandbox being destroyed.
	SessionStopping SessionState = "stopping"
	SessionStopped  SessionState = "stopped"
	SessionExpired  SessionState = "expired"
)

// LiveStates are the states in which a record holds a sandbox: what limits
// count and what recovery looks after.
var LiveStates = []SessionState{SessionPooled, SessionCreating, SessionRunning, SessionPaused, SessionStopping}

// Live reports whether the state holds a sandbox.
func (st SessionState) Live() bool {
	return st == SessionPooled || st == SessionCreating || st == SessionRunning || st == SessionPaused || st == SessionStopping
}

// Session is what agents hold on to: one sandbox plus its kernels, owned
// by one tenant. Records outlive the mcpbox process (see Store).
type Session struct {
	ID    string       `json:"id"`
	Owner string       `json:"owner"`
	State SessionState `json:"state"`
	// Template names the sandbox image; "" is the host template.
	Template string            `json:"template,omitempty"`
	Flavor   Flavor            `json:"flavor"`
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Volumes  []Volume          `json:"volumes,omitempty"`
	// Network is the session's egress policy; nil means no network. The
	// proxy reads it from the record at every new connection, so a
	// change takes effect for the next one.
	Network *NetworkPolicy `json:"network,omitempty"`

	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used"`
	// ExpiresAt is the absolute end of the session (its TTL).
	ExpiresAt time.Time `json:"expires_at"`
	// IdleTimeout ends the session after this long without use.
	IdleTimeout time.Duration `json:"idle_timeout"`
	// PausedAt is when a paused session was paused; zero otherwise. The
	// time it stays paused is added to its deadlines when it resumes.
	PausedAt time.Time `json:"paused_at,omitzero"`
	// AutoPause pauses the session at its deadline instead of ending it
	// (E2B's autoPause); it ends once paused for the maximum TTL.
	AutoPause bool `json:"auto_pause,omitempty"`

	// Sandbox is the runtime's view of the session's sandbox.
	Sandbox *Sandbox `json:"sandbox,omitempty"`

	// Holder names the mcpbox process that looks after the sandbox (its
	// lease is "process/<Holder>" in the store). When that lease expires,
	// another process takes the record over or cleans it up.
	Holder string `json:"holder,omitempty"`
	// Revision is the store's version of the record: UpdateSession writes
	// only when it is unchanged since the record was read, then bumps it.
	Revision int64 `json:"revision"`
}

// Deadline is when the session ends unless used again: the earlier of its
// TTL and its idle timeout.
func (s *Session) Deadline() time.Time {
	d := s.ExpiresAt
	if s.IdleTimeout > 0 {
		if idle := s.LastUsed.Add(s.IdleTimeout); d.IsZero() || idle.Before(d) {
			d = idle
		}
	}
	return d
}

// SessionFilter selects sessions in Store.ListSessions. Zero fields match
// everything.
type SessionFilter struct {
	Owner string
	// States, when not empty, keeps sessions in one of these states.
	States []SessionState
	// Metadata keeps sessions whose metadata holds every pair given.
	Metadata map[string]string
}

// Match reports whether s passes the filter.
func (f SessionFilter) Match(s *Session) bool {
	if f.Owner != "" && s.Owner != f.Owner {
		return false
	}
	if len(f.States) > 0 {
		ok := false
		for _, st := range f.States {
			ok = ok || s.State == st
		}
		if !ok {
			return false
		}
	}
	for k, v := range f.Metadata {
		if s.Metadata[k] != v {
			return false
		}
	}
	return true
}

// Admission is what a new live record may not push past: the limits the
// store checks in the same step that writes the record, so they hold across
// every process sharing it. Zero fields are unchecked.
type Admission struct {
	// MaxTotal caps live records (any owner, pools included).
	MaxTotal int
	// MaxPerOwner caps the live records of the record's owner.
	MaxPerOwner int
}

// Store keeps session records and leases. Several mcpbox processes may
// share one (a SQLite file in one home; later, a cluster), so records are
// never blindly replaced: every update is a compare-and-swap on Revision.
type Store interface {
	// CreateSession inserts a new record at revision 1 and sets
	// s.Revision. It fails with ELIMIT, leaving nothing written, when a
	// live record would break lim, and with ECONFLICT when the id exists.
	CreateSession(ctx context.Context, s *Session, lim Admission) error
	// UpdateSession replaces the record when its stored revision is still
	// s.Revision and sets s.Revision to the new one; otherwise it fails
	// with ECONFLICT (or ESESSION when the record is gone) and writes
	// nothing. When lim is not nil and s is live, lim is checked as for
	// CreateSession, counting s under its new owner once.
	UpdateSession(ctx context.Context, s *Session, lim *Admission) error
	// GetSession returns a record, or an Error with code ESESSION.
	GetSession(ctx context.Context, id string) (*Session, error)
	// ListSessions returns the records f matches, oldest first.
	ListSessions(ctx context.Context, f SessionFilter) ([]*Session, error)
	// DeleteSession removes a record; a missing one is not an error.
	DeleteSession(ctx context.Context, id string) error

	// AcquireLease takes the named lease for holder until ttl from now,
	// when it is free, expired or already holder's (which renews it), and
	// reports whether holder has it.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives up holder's lease; one held by another is left.
	ReleaseLease(ctx context.Context, name, holder string) error
	// Lease returns the named lease's holder and expiry; an unknown lease
	// has holder "".
	Lease(ctx context.Context, name string) (holder string, expires time.Time, err error)

	// Close releases the store.
	Close() error
}

// EventType names a lifecycle event.
type EventType string

// Lifecycle events the manager publishes.
const (
	EventCreated      EventType = "created"
	EventStateChanged EventType = "state_changed"
	EventStopped      EventType = "stopped"
	EventExpired      EventType = "expired"
)

// Event is one lifecycle event of a session.
type Event struct {
	Type    EventType `json:"type"`
	Session Session   `json:"session"`
	Time    time.Time `json:"time"`
}

// SessionNotFound is the error for a session that does not exist — or that
// the caller does not own, which must look the same.
func SessionNotFound(id string) *Error {
	return Errorf(ESESSION, "session %q not found", id).
		WithSuggestion("list your sessions with get_sessions, or create one")
}

// CheckAdmission applies lim to a new live record of owner, given how many
// live records exist in total and for owner (not counting the new one).
// Stores call it in the same step as their write.
func CheckAdmission(lim Admission, owner string, total, ofOwner int) error {
	if lim.MaxPerOwner > 0 && owner != "" && ofOwner >= lim.MaxPerOwner {
		return Errorf(ELIMIT, "owner %q has its maximum of %d sessions", owner, lim.MaxPerOwner).
			With("limit", lim.MaxPerOwner).With("current", ofOwner).
			WithSuggestion("stop one of your sessions (stop_session) or reuse one by its session_id")
	}
	if lim.MaxTotal > 0 && total >= lim.MaxTotal {
		return Errorf(ELIMIT, "the server runs its maximum of %d sessions", lim.MaxTotal).
			With("limit", lim.MaxTotal).With("current", total).
			WithSuggestion("stop a session you no longer need, or try again later")
	}
	return nil
}

// Conflict is the error of a compare-and-swap that lost.
func Conflict(id string, had, now int64) *Error {
	return Errorf(ECONFLICT, "session %q changed meanwhile (revision %d, now %d)", id, had, now).
		WithSuggestion("read the session again and retry")
}
