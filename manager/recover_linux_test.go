package manager_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == local.InitArg {
		local.InitMain()
	}
	os.Exit(m.Run())
}

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
	c := agentclient.New(keep.Sandbox.Endpoint)
	if err := c.Upload(ctx, "/workspace/state.txt", bytes.NewReader([]byte("x = 42"))); err != nil {
		t.Fatal(err)
	}
	c.Close()
	syscall.Kill(dead.Sandbox.PID, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)

	m2, rep := start(t, home)
	if len(rep.Adopted) != 1 || rep.Adopted[0] != keep.ID || len(rep.Ended) != 1 || rep.Ended[0] != dead.ID {
		t.Fatalf("recover report %+v; want %s adopted and %s ended", rep, keep.ID, dead.ID)
	}
	s, err := m2.Get(ctx, "alice", keep.ID)
	if err != nil || s.State != mcpbox.SessionRunning {
		t.Fatalf("adopted session: %+v, %v", s, err)
	}
	c = agentclient.New(s.Sandbox.Endpoint)
	defer c.Close()
	rc, err := c.Download(ctx, "/workspace/state.txt")
	if err != nil {
		t.Fatalf("adopted session lost its workspace: %v", err)
	}
	var b bytes.Buffer
	b.ReadFrom(rc)
	rc.Close()
	if b.String() != "x = 42" {
		t.Errorf("workspace file = %q", b.String())
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
