// Package memstore is an in-memory mcpbox.Store, for tests and for
// servers started with --ephemeral.
package memstore

import (
	"context"
	"encoding/json"
	"sort"
	"sync"

	"github.com/mcpbox/mcpbox"
)

// Store keeps sessions in a map. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	sessions map[string][]byte // JSON, so callers never share memory with us
}

var _ mcpbox.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store { return &Store{sessions: map[string][]byte{}} }

// PutSession creates or replaces a record.
func (s *Store) PutSession(_ context.Context, sess *mcpbox.Session) error {
	b, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.sessions[sess.ID] = b
	s.mu.Unlock()
	return nil
}

// GetSession returns a record.
func (s *Store) GetSession(_ context.Context, id string) (*mcpbox.Session, error) {
	s.mu.Lock()
	b, ok := s.sessions[id]
	s.mu.Unlock()
	if !ok {
		return nil, mcpbox.SessionNotFound(id)
	}
	var sess mcpbox.Session
	return &sess, json.Unmarshal(b, &sess)
}

// ListSessions returns the records f matches, oldest first.
func (s *Store) ListSessions(_ context.Context, f mcpbox.SessionFilter) ([]*mcpbox.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*mcpbox.Session
	for _, b := range s.sessions {
		var sess mcpbox.Session
		if err := json.Unmarshal(b, &sess); err != nil {
			return nil, err
		}
		if f.Match(&sess) {
			out = append(out, &sess)
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

// Close does nothing.
func (s *Store) Close() error { return nil }
