package mcpbox

import (
	"context"
	"time"
)

// LocalOwner owns what stdio clients and the CLI create.
const LocalOwner = "local"

// SessionState is where a session is in its life.
type SessionState string

// Session states.
const (
	SessionCreating SessionState = "creating"
	SessionRunning  SessionState = "running"
	SessionStopped  SessionState = "stopped"
	SessionExpired  SessionState = "expired"
)

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

	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used"`
	// ExpiresAt is the absolute end of the session (its TTL).
	ExpiresAt time.Time `json:"expires_at"`
	// IdleTimeout ends the session after this long without use.
	IdleTimeout time.Duration `json:"idle_timeout"`

	// Sandbox is the runtime's view: where the agent answers.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
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

// Store keeps session records. The SQLite store keeps them across restarts;
// the memory store is for tests and --ephemeral.
type Store interface {
	// PutSession creates or replaces a record.
	PutSession(ctx context.Context, s *Session) error
	// GetSession returns a record, or an Error with code ESESSION.
	GetSession(ctx context.Context, id string) (*Session, error)
	// ListSessions returns the records f matches, oldest first.
	ListSessions(ctx context.Context, f SessionFilter) ([]*Session, error)
	// DeleteSession removes a record; a missing one is not an error.
	DeleteSession(ctx context.Context, id string) error
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
