package manager_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// waitFor polls cond for up to 5s: pools refill in the background.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWarmPool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, rt, _ := newManager(t, manager.Options{MaxSessions: 6, MaxSessionsPerOwner: 6,
		Pools: []manager.PoolSpec{{Flavor: "small", Size: 3}}})
	defer m.Close(ctx)
	go m.Run(ctx)
	waitFor(t, "the pool to fill", func() bool { return m.PoolStats()["/small"] == 3 })
	if rt.Created != 3 {
		t.Fatalf("created %d sandboxes for a pool of 3", rt.Created)
	}
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Created != 3 && rt.Created != 4 {
		t.Fatalf("create did not take a warm sandbox (created %d)", rt.Created)
	}
	if s.Owner != "alice" || s.Env["K"] != "v" || s.Sandbox == nil || s.ID != s.Sandbox.ID {
		t.Errorf("warm session %+v", s)
	}
	waitFor(t, "the pool to refill", func() bool { return m.PoolStats()["/small"] == 3 })

	// A burst beyond the pool falls back to cold creation, and nothing
	// ever exceeds the global limit: 2 live + pool members <= 6.
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Create(ctx, "alice", manager.CreateRequest{})
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	if live := rt.Live(); live > 6 {
		t.Errorf("%d sandboxes exist, above the global limit of 6", live)
	}
	list, _ := m.List(ctx, "alice", sessionsRunning)
	if len(list) != 6 {
		t.Errorf("%d sessions after the burst, want the limit of 6", len(list))
	}
	if n := m.PoolStats()["/small"]; n != 0 {
		t.Errorf("pool holds %d with the server at its limit, want 0", n)
	}
}

// A create at the global limit while the pool is still making the
// sandbox that holds the last place waits for it and claims it, rather
// than being refused for a limit its own pool filled.
func TestCreateAtLimitWaitsForPool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := testutil.NewFakeRuntime()
	rt.CreateDelay = 300 * time.Millisecond
	st := memstore.New()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: st, MaxSessions: 1, MaxSessionsPerOwner: 1,
		Pools:      []manager.PoolSpec{{Flavor: "small", Size: 1}},
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	go m.Run(ctx)
	var making string
	waitFor(t, "the pool to start a sandbox", func() bool {
		recs, _ := st.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionCreating}})
		if len(recs) == 1 {
			making = recs[0].ID
		}
		return making != ""
	})
	s, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatalf("create while the pool fills the last place: %v", err)
	}
	if s.ID != making {
		t.Errorf("session %s, want the pool's sandbox %s", s.ID, making)
	}
}

// A create at the limit that a pool of another kind holds takes its
// place: the ready pool sandbox is destroyed and the create goes on.
func TestCreateAtLimitEvictsOtherPool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, rt, _ := newManager(t, manager.Options{MaxSessions: 1, MaxSessionsPerOwner: 1,
		Pools: []manager.PoolSpec{{Flavor: "small", Size: 1}}})
	defer m.Close(ctx)
	go m.Run(ctx)
	waitFor(t, "the pool to fill", func() bool { return m.PoolStats()["/small"] == 1 })
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Flavor: "medium"})
	if err != nil {
		t.Fatalf("create of another flavor with the pool holding the last place: %v", err)
	}
	if s.Flavor.Name != "medium" || rt.Live() != 1 {
		t.Errorf("session of flavor %s with %d sandboxes live, want medium and 1", s.Flavor.Name, rt.Live())
	}
	// Ask for more than the limit: refused, and no pool is left to give way.
	if _, err := m.Create(ctx, "bob", manager.CreateRequest{}); mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
		t.Errorf("a create past the limit: %v, want ELIMIT", err)
	}
}
