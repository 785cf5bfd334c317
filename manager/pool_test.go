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

// specRuntime records the spec of every sandbox it creates.
type specRuntime struct {
	*testutil.FakeRuntime
	mu    sync.Mutex
	specs map[string]mcpbox.SandboxSpec
}

func (r *specRuntime) Create(ctx context.Context, spec mcpbox.SandboxSpec) (*mcpbox.Sandbox, error) {
	r.mu.Lock()
	r.specs[spec.ID] = spec
	r.mu.Unlock()
	return r.FakeRuntime.Create(ctx, spec)
}

func (r *specRuntime) spec(id string) mcpbox.SandboxSpec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[id]
}

// pooledIDs lists the ready pool sandboxes in st.
func pooledIDs(t *testing.T, st mcpbox.Store) []string {
	t.Helper()
	recs, err := st.ListSessions(context.Background(), mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	return ids
}

// hostedKind is what a hosted MCP server's sandbox is created as.
var hostedKind = manager.CreateRequest{NoKernel: true, Ephemeral: true}

// A pool of Warm's is filled by its own process without the maintainer
// lease, with sandboxes made as its kind asks (ephemeral, no kernel); only
// creates of that kind made by that process claim them, for their owner;
// release and Close destroy what is left.
func TestWarmKind(t *testing.T) {
	ctx := context.Background()
	rt := &specRuntime{FakeRuntime: testutil.NewFakeRuntime(), specs: map[string]mcpbox.SandboxSpec{}}
	st := memstore.New()
	newM := func(holder string) *manager.Manager {
		m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: st, Holder: holder,
			WarmKernel: func(context.Context, http.RoundTripper) error {
				t.Error("a no-kernel pool warmed a kernel")
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m, other := newM("one"), newM("two")
	defer other.Close(ctx)
	const key = "/small/ephemeral+no-kernel"
	if _, err := m.Warm(manager.PoolSpec{Size: 0}); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("Warm of size 0: %v, want INVALID", err)
	}
	if _, err := m.Warm(manager.PoolSpec{Template: "nosuch", Size: 1, NoKernel: true, Ephemeral: true}); err == nil {
		t.Error("Warm of a template that does not exist: no error")
	}
	release, err := m.Warm(manager.PoolSpec{Size: 1, NoKernel: true, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	// A second user shares the pool: its release alone stops nothing.
	release2, err := m.Warm(manager.PoolSpec{Flavor: "small", Size: 1, NoKernel: true, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to fill", func() bool { return m.PoolStats()[key] == 1 })
	release2()
	ids := pooledIDs(t, st)
	if len(ids) != 1 {
		t.Fatalf("pooled %v, want one sandbox", ids)
	}
	pooled := ids[0]
	if sp := rt.spec(pooled); !sp.Ephemeral || len(sp.Prestart) != 0 {
		t.Errorf("pool sandbox made with ephemeral %v, prestart %v; want ephemeral and no kernel", sp.Ephemeral, sp.Prestart)
	}

	// Other kinds, and the same kind in another process, make their own.
	for _, c := range []struct {
		name string
		m    *manager.Manager
		req  manager.CreateRequest
	}{
		{"plain", m, manager.CreateRequest{}},
		{"no kernel, not ephemeral", m, manager.CreateRequest{NoKernel: true}},
		{"ephemeral with a kernel", m, manager.CreateRequest{Ephemeral: true}},
		{"another process", other, hostedKind},
	} {
		s, err := c.m.Create(ctx, "bob", c.req)
		if err != nil {
			t.Fatal(err)
		}
		if s.ID == pooled {
			t.Errorf("%s: claimed the pool's sandbox", c.name)
		}
	}

	s, err := m.Create(ctx, "alice", hostedKind)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != pooled {
		t.Fatalf("hosted create got %s, not the pool's %s", s.ID, pooled)
	}
	if s.Owner != "alice" || s.State != mcpbox.SessionRunning || s.Metadata["mcpbox.pool"] != "" {
		t.Errorf("claimed session %+v", s)
	}
	if _, err := m.Get(ctx, "bob", s.ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("bob sees alice's claimed session: %v", err)
	}
	if got, err := m.Get(ctx, "alice", s.ID); err != nil || got.Owner != "alice" {
		t.Errorf("alice's claimed session: %+v %v", got, err)
	}
	waitFor(t, "the pool to refill", func() bool { return m.PoolStats()[key] == 1 })

	live := rt.Live()
	release()
	release() // a second call does nothing
	if n := len(pooledIDs(t, st)); n != 0 {
		t.Errorf("%d pool sandboxes left after the last release", n)
	}
	if rt.Live() != live-1 {
		t.Errorf("%d sandboxes live after the release, want %d", rt.Live(), live-1)
	}
	if _, ok := m.PoolStats()[key]; ok {
		t.Error("PoolStats still lists the released pool")
	}

	// Close destroys a pool of Warm's too, maintainer or not.
	if _, err := m.Warm(manager.PoolSpec{Size: 1, NoKernel: true, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to fill", func() bool { return m.PoolStats()[key] == 1 })
	m.Close(ctx)
	if n := len(pooledIDs(t, st)); n != 0 {
		t.Errorf("%d pool sandboxes left after Close", n)
	}
	if _, err := m.Warm(manager.PoolSpec{Size: 1, NoKernel: true, Ephemeral: true}); err == nil {
		t.Error("Warm after Close: no error")
	}
}

// A configured pool cannot be ephemeral: no maintainer could hand its
// sandboxes to another process.
func TestEphemeralPoolConfigRefused(t *testing.T) {
	_, err := manager.New(context.Background(), &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: memstore.New(),
		Pools: []manager.PoolSpec{{Size: 1, Ephemeral: true}}})
	if mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("an ephemeral configured pool: %v, want INVALID", err)
	}
}

// At the global limit, a pool of Warm's gives way to another create as
// the configured ones do.
func TestCreateAtLimitEvictsWarm(t *testing.T) {
	ctx := context.Background()
	m, rt, _ := newManager(t, manager.Options{MaxSessions: 1, MaxSessionsPerOwner: 1})
	defer m.Close(ctx)
	release, err := m.Warm(manager.PoolSpec{Size: 1, NoKernel: true, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	waitFor(t, "the pool to fill", func() bool { return m.PoolStats()["/small/ephemeral+no-kernel"] == 1 })
	s, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatalf("create with a hosted pool holding the last place: %v", err)
	}
	if rt.Live() != 1 || s.Owner != "alice" {
		t.Errorf("%d sandboxes live, session %+v; want alice's alone", rt.Live(), s)
	}
}
