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

// clock is a fake clock tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newManager(t *testing.T, opts manager.Options) (*manager.Manager, *testutil.FakeRuntime, *clock) {
	t.Helper()
	rt := testutil.NewFakeRuntime()
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	opts.Runtime, opts.Store, opts.Now = rt, memstore.New(), clk.Now
	opts.WarmKernel = func(context.Context, http.RoundTripper) error { return nil } // no agent behind the fake
	m, err := manager.New(context.Background(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, rt, clk
}

func TestOwnership(t *testing.T) {
	m, _, _ := newManager(t, manager.Options{})
	ctx := context.Background()
	s, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// To bob, alice's session does not exist: the same error as a made-up id.
	_, missing := m.Get(ctx, "bob", "nosuchsession")
	for name, err := range map[string]error{
		"get":         func() error { _, err := m.Get(ctx, "bob", s.ID); return err }(),
		"touch":       func() error { _, err := m.Touch(ctx, "bob", s.ID); return err }(),
		"stop":        m.Stop(ctx, "bob", s.ID),
		"set timeout": m.SetTimeout(ctx, "bob", s.ID, time.Minute),
	} {
		if mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("%s by another owner: %v, want %s", name, err, mcpbox.ESESSION)
		}
		if err != nil && len(err.Error()) != len(missing.Error())-len("nosuchsession")+len(s.ID) {
			t.Errorf("%s: %q differs in shape from a missing session's %q", name, err, missing)
		}
	}
	if list, _ := m.List(ctx, "bob", mcpbox.SessionFilter{Owner: "alice"}); len(list) != 0 {
		t.Errorf("bob listed %d of alice's sessions", len(list))
	}
	if list, _ := m.List(ctx, "alice", mcpbox.SessionFilter{}); len(list) != 1 {
		t.Errorf("alice lists %d sessions, want 1", len(list))
	}
	if got, err := m.Get(ctx, "alice", s.ID); err != nil || got.State != mcpbox.SessionRunning {
		t.Errorf("alice's own session: %v, %v", got, err)
	}
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	m, rt, _ := newManager(t, manager.Options{MaxSessions: 3, MaxSessionsPerOwner: 2, MaxTTL: time.Hour,
		HostCPUs: 2, HostMemoryBytes: 4 << 30,
		Flavors: map[string]mcpbox.Flavor{"tiny": {CPUs: 0.5, MemoryBytes: 256 << 20, DiskBytes: 256 << 20, Pids: 64}}})
	for _, tc := range []struct {
		name, owner string
		req         manager.CreateRequest
		code        string
	}{
		{"first", "alice", manager.CreateRequest{}, ""},
		{"custom flavor", "alice", manager.CreateRequest{Flavor: "tiny"}, ""},
		{"per owner", "alice", manager.CreateRequest{}, mcpbox.ELIMIT},
		{"other owner", "bob", manager.CreateRequest{}, ""},
		{"total", "carol", manager.CreateRequest{}, mcpbox.ELIMIT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Create(ctx, tc.owner, tc.req)
			if mcpbox.ErrorCode(err) != tc.code {
				t.Fatalf("err = %v, want code %q", err, tc.code)
			}
			if tc.code == mcpbox.ELIMIT {
				var e *mcpbox.Error
				if !asError(err, &e) || e.Context["limit"] == nil || len(e.Suggestions) == 0 {
					t.Errorf("limit error lacks its numbers or a suggestion: %#v", err)
				}
			}
		})
	}
	if rt.Live() != 3 {
		t.Errorf("%d sandboxes, want 3", rt.Live())
	}
	m2, _, _ := newManager(t, manager.Options{MaxTTL: time.Hour, HostCPUs: 2, HostMemoryBytes: 4 << 30})
	for _, tc := range []struct {
		name string
		req  manager.CreateRequest
		code string
	}{
		{"ttl above max", manager.CreateRequest{TTL: 2 * time.Hour}, mcpbox.ELIMIT},
		{"flavor larger than the host", manager.CreateRequest{Flavor: "large"}, mcpbox.ELIMIT},
		{"unknown flavor", manager.CreateRequest{Flavor: "huge"}, mcpbox.EINVALID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m2.Create(ctx, "alice", tc.req); mcpbox.ErrorCode(err) != tc.code {
				t.Errorf("err = %v, want %s", err, tc.code)
			}
		})
	}
	// Stopping frees a slot.
	list, _ := m.List(ctx, "alice", mcpbox.SessionFilter{})
	if err := m.Stop(ctx, "alice", list[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx, "alice", list[0].ID); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if _, err := m.Create(ctx, "alice", manager.CreateRequest{}); err != nil {
		t.Errorf("create after stop: %v", err)
	}
}

func TestConcurrentCreatesRespectLimits(t *testing.T) {
	m, rt, _ := newManager(t, manager.Options{MaxSessions: 10, MaxSessionsPerOwner: 10})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Create(context.Background(), "alice", manager.CreateRequest{})
		}()
	}
	wg.Wait()
	if rt.Created != 10 || rt.Live() != 10 {
		t.Errorf("created %d, live %d; want exactly 10", rt.Created, rt.Live())
	}
}

func TestReaper(t *testing.T) {
	ctx := context.Background()
	m, rt, clk := newManager(t, manager.Options{DefaultIdleTimeout: 15 * time.Minute, DefaultTTL: time.Hour})
	events, cancel := m.Subscribe()
	defer cancel()
	idle, _ := m.Create(ctx, "alice", manager.CreateRequest{})
	busy, _ := m.Create(ctx, "alice", manager.CreateRequest{})
	short, _ := m.Create(ctx, "alice", manager.CreateRequest{TTL: 5 * time.Minute})

	clk.Advance(6 * time.Minute)
	if n, err := m.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("reaped %d, %v; want the 5-minute session", n, err)
	}
	clk.Advance(8 * time.Minute)
	m.Touch(ctx, "alice", busy.ID) // used at 14m: idle until 29m
	clk.Advance(2 * time.Minute)   // 16m
	if n, _ := m.Reap(ctx); n != 1 {
		t.Fatalf("reaped %d at 16m, want the idle one", n)
	}
	if s, _ := m.Get(ctx, "alice", idle.ID); s.State != mcpbox.SessionExpired {
		t.Errorf("idle session state %s", s.State)
	}
	if s, _ := m.Get(ctx, "alice", busy.ID); s.State != mcpbox.SessionRunning {
		t.Errorf("busy session state %s, want running", s.State)
	}
	clk.Advance(time.Hour)
	m.Reap(ctx)
	if rt.Live() != 0 {
		t.Errorf("%d sandboxes left after every deadline passed", rt.Live())
	}
	var got []mcpbox.EventType
	for len(got) < 6 {
		got = append(got, (<-events).Type)
	}
	want := []mcpbox.EventType{mcpbox.EventCreated, mcpbox.EventCreated, mcpbox.EventCreated, mcpbox.EventExpired, mcpbox.EventExpired, mcpbox.EventExpired}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	_ = short
}

// TestSessionRecordCache checks the second a live session's record serves
// calls from memory: the owner check still applies, an end in this
// process is seen at once, and one in another process within a second.
func TestSessionRecordCache(t *testing.T) {
	ctx := context.Background()
	rt := testutil.NewFakeRuntime()
	st := memstore.New()
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	open := func() *manager.Manager {
		m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: st, Now: clk.Now,
			WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m, other := open(), open()
	// Calls reach past the record to the agent, which the fake runtime
	// does not have: any error but SESSION_NOT_FOUND means the record let
	// the call through.
	use := func(m *manager.Manager, owner, id string) string {
		_, err := m.ReadFile(ctx, owner, id, "/workspace/x")
		return mcpbox.ErrorCode(err)
	}
	a, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if code := use(m, "alice", a.ID); code == mcpbox.ESESSION {
		t.Fatalf("alice's live session: %s", code)
	}
	if code := use(m, "bob", a.ID); code != mcpbox.ESESSION {
		t.Errorf("bob, right after alice's call: %s, want %s", code, mcpbox.ESESSION)
	}
	if err := m.Stop(ctx, "alice", a.ID); err != nil {
		t.Fatal(err)
	}
	if code := use(m, "alice", a.ID); code != mcpbox.ESESSION {
		t.Errorf("right after stopping it here: %s, want %s", code, mcpbox.ESESSION)
	}

	b, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	use(m, "alice", b.ID)
	if err := other.Stop(ctx, "alice", b.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1100 * time.Millisecond)
	if code := use(m, "alice", b.ID); code != mcpbox.ESESSION {
		t.Errorf("a second after another manager stopped it: %s, want %s", code, mcpbox.ESESSION)
	}
}
