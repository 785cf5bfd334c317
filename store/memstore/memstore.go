// Package memstore is an in-memory mcpbox.Store, for tests and for
// servers started with --ephemeral. It coordinates the goroutines of one
// process exactly as the SQLite store coordinates processes: records by
// compare-and-swap, limits checked in the same step as the write, leases.
package memstore

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Store keeps sessions in a map. It is safe for concurrent use.
type Store struct {
	// Now is the clock leases are judged by; default time.Now.
	Now func() time.Time

	mu       sync.Mutex
	sessions map[string][]byte // JSON, so callers never share memory with us
	leases   map[string]lease
}

type lease struct {
	holder  string
	expires time.Time
}

var _ mcpbox.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{Now: time.Now, sessions: map[string][]byte{}, leases: map[string]lease{}}
}

func (s *Store) decodeLocked(id string) (*mcpbox.Session, bool) {
	b, ok := s.sessions[id]
	if !ok {
		return nil, false
	}
	var sess mcpbox.Session
	if json.Unmarshal(b, &sess) != nil {
		return nil, false
	}
	return &sess, true
}

// admitLocked checks lim for sess, not counting the record with sess's id.
func (s *Store) admitLocked(sess *mcpbox.Session, lim mcpbox.Admission) error {
	if !sess.State.Live() {
		return nil
	}
	total, owner := 0, 0
	for id := range s.sessions {
		if id == sess.ID {
			continue
		}
		x, _ := s.decodeLocked(id)
		if x == nil || !x.State.Live() {
			continue
		}
		total++
		if x.Owner == sess.Owner {
			owner++
		}
	}
	return mcpbox.CheckAdmission(lim, sess.Owner, total, owner)
}

// CreateSession inserts a new record.
func (s *Store) CreateSession(_ context.Context, sess *mcpbox.Session, lim mcpbox.Admission) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[sess.ID]; ok {
		return mcpbox.Errorf(mcpbox.ECONFLICT, "session %q already exists", sess.ID)
	}
	if err := s.admitLocked(sess, lim); err != nil {
		return err
	}
	return s.writeLocked(sess, 1)
}

func (s *Store) writeLocked(sess *mcpbox.Session, rev int64) error {
	old := sess.Revision
	sess.Revision = rev
	b, err := json.Marshal(sess)
	if err != nil {
		sess.Revision = old
		return err
	}
	s.sessions[sess.ID] = b
	return nil
}

// UpdateSession replaces a record whose revision is unchanged.
func (s *Store) UpdateSession(_ context.Context, sess *mcpbox.Session, lim *mcpbox.Admission) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.decodeLocked(sess.ID)
	if !ok {
		return mcpbox.SessionNotFound(sess.ID)
	}
	if cur.Revision != sess.Revision {
		return mcpbox.Conflict(sess.ID, sess.Revision, cur.Revision)
	}
	if lim != nil {
		if err := s.admitLocked(sess, *lim); err != nil {
			return err
		}
	}
	return s.writeLocked(sess, cur.Revision+1)
}

// GetSession returns a record.
func (s *Store) GetSession(_ context.Context, id string) (*mcpbox.Session, error) {
	s.mu.Lock()
	sess, ok := s.decodeLocked(id)
	s.mu.Unlock()
	if !ok {
		return nil, mcpbox.SessionNotFound(id)
	}
	return sess, nil
}

// ListSessions returns the records f matches, oldest first.
func (s *Store) ListSessions(_ context.Context, f mcpbox.SessionFilter) ([]*mcpbox.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*mcpbox.Session
	for id := range s.sessions {
		if sess, ok := s.decodeLocked(id); ok && f.Match(sess) {
			out = append(out, sess)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// DeleteSession removes a record.
func (s *Store) DeleteSession(_ context.Context, id string) error {
	s.mu.Lock()
	delete(s.sessions, id)
	s.mu.Unlock()
	return nil
}

// AcquireLease takes or renews a lease.
func (s *Store) AcquireLease(_ context.Context, name, holder string, ttl time.Duration) (bool, error) {
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[name]; ok && l.holder != holder && now.Before(l.expires) {
		return false, nil
	}
	s.leases[name] = lease{holder, now.Add(ttl)}
	return true, nil
}

// ReleaseLease gives up holder's lease.
func (s *Store) ReleaseLease(_ context.Context, name, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[name].holder == holder {
		delete(s.leases, name)
	}
	return nil
}

// Lease returns a lease's holder and expiry.
func (s *Store) Lease(_ context.Context, name string) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[name]
	return l.holder, l.expires, nil
}

// Close does nothing.
func (s *Store) Close() error { return nil }
