package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/internal/testutil/reexec"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func TestMain(m *testing.M) { reexec.Main(m) }

// start opens a runtime, a store and a manager on home, as mcpbox does at
// start, and recovers.
func start(t *testing.T, home string) (*manager.Manager, *manager.RecoverReport) {
	t.Helper()
	rt, err := local.New(&local.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(home, "mcpbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(context.Background(), &manager.Options{Runtime: rt, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := m.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m, rep
}

// TestRecoverAfterRestart: a second manager on the same home re-adopts the
// session whose agent lives, with its files, and cleans up the one whose
// agent was killed.
func TestRecoverAfterRestart(t *testing.T) {
	testutil.RequireRoot(t)
	home := testutil.Home(t)
	ctx := context.Background()
	m1, _ := start(t, home)
	keep, err := m1.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := m1.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Track(keep.ID, dead.ID)
	if err := m1.WriteFile(ctx, "alice", keep.ID, "/workspace/state.txt", []byte("x = 42")); err != nil {
		t.Fatal(err)
	}
	rt1, _ := local.New(&local.Options{Home: home})
	syscall.Kill(rt1.PID(dead.ID), syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	// The first process goes away; its lease with it.
	m1.Close(ctx)

	m2, rep := start(t, home)
	if len(rep.Adopted) != 1 || rep.Adopted[0] != keep.ID || len(rep.Ended) != 1 || rep.Ended[0] != dead.ID {
		t.Fatalf("recover report %+v; want %s adopted and %s ended", rep, keep.ID, dead.ID)
	}
	s, err := m2.Get(ctx, "alice", keep.ID)
	if err != nil || s.State != mcpbox.SessionRunning {
		t.Fatalf("adopted session: %+v, %v", s, err)
	}
	b, err := m2.ReadFile(ctx, "alice", keep.ID, "/workspace/state.txt")
	if err != nil {
		t.Fatalf("adopted session lost its workspace: %v", err)
	}
	if string(b) != "x = 42" {
		t.Errorf("workspace file = %q", b)
	}
	if d, _ := m2.Get(ctx, "alice", dead.ID); d.State != mcpbox.SessionStopped {
		t.Errorf("dead session state %s, want stopped", d.State)
	}
	if _, err := os.Stat(filepath.Join(home, "sessions", dead.ID)); err == nil {
		t.Errorf("dead sandbox's directory left behind")
	}
	if err := m2.Stop(ctx, "alice", keep.ID); err != nil {
		t.Fatal(err)
	}
	if leaks := testutil.CheckLeaks(); len(leaks) > 0 {
		t.Errorf("left behind: %v", leaks)
	}
}
