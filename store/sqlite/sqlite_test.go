package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/store/sqlite"
	"github.com/mcpbox/mcpbox/store/storetest"
)

func open(t *testing.T, file string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) mcpbox.Store {
		s := open(t, filepath.Join(t.TempDir(), "mcpbox.db"))
		t.Cleanup(func() { s.Close() })
		return s
	})
	// Two Stores on one file are two processes sharing a home.
	storetest.RunShared(t, func(t *testing.T) (mcpbox.Store, mcpbox.Store) {
		file := filepath.Join(t.TempDir(), "mcpbox.db")
		a, b := open(t, file), open(t, file)
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	})
}

// TestSurvivesReopen is what a restart relies on: records written by one
// Store are there for the next one on the same file.
func TestSurvivesReopen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mcpbox.db")
	ctx := context.Background()
	s := open(t, file)
	want := &mcpbox.Session{ID: "keep1", Owner: "alice", State: mcpbox.SessionRunning, Created: time.Now().UTC()}
	if err := s.CreateSession(ctx, want, mcpbox.Admission{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, file) // migrations must be idempotent too
	defer s.Close()
	got, err := s.GetSession(ctx, "keep1")
	if err != nil || got.Owner != "alice" || !got.Created.Equal(want.Created) {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

// TestPrivate: the database and its WAL hold session env values and key
// hashes: only their owner may read them, also when an older mcpbox made
// the file world-readable.
func TestPrivate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mcpbox.db")
	os.WriteFile(file, nil, 0o644)
	os.Chmod(file, 0o644)
	s := open(t, file)
	defer s.Close()
	if err := s.CreateSession(context.Background(), &mcpbox.Session{ID: "p1", State: mcpbox.SessionStopped}, mcpbox.Admission{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{file, file + "-wal", file + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want -rw-------", filepath.Base(f), fi.Mode().Perm())
		}
	}
}
