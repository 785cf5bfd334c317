package manager_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/memstore"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func noWarm(context.Context, http.RoundTripper) error { return nil }

// TestDoor: the door hands out a RoundTripper that reaches the session's
// agent on any path, counts the call, and is shut to other owners and to
// ended sessions.
func TestDoor(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, manager.Options{})
	s, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := m.Agent(ctx, "alice", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox/health", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Errorf("GET /health through the door: %s", resp.Status)
	}
	before := m.Calls(s.ID)
	if _, err := m.Agent(ctx, "alice", s.ID); err != nil {
		t.Fatal(err)
	}
	if m.Calls(s.ID) != before+1 {
		t.Errorf("the door counted %d calls after one more, had %d", m.Calls(s.ID), before)
	}
	if _, err := m.Agent(ctx, "bob", s.ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("bob at alice's door: %v, want %s", err, mcpbox.ESESSION)
	}
	if err := m.Stop(ctx, "alice", s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Agent(ctx, "alice", s.ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("the door of a stopped session: %v, want %s", err, mcpbox.ESESSION)
	}
}

// interleave is a Store that runs hook once, right after the first
// GetSession of a given id returns: it puts another caller's whole
// operation between a read and the write that follows it.
type interleave struct {
	mcpbox.Store
	id   string
	done atomic.Bool
	hook func()
}

func (s *interleave) GetSession(ctx context.Context, id string) (*mcpbox.Session, error) {
	got, err := s.Store.GetSession(ctx, id)
	if id == s.id && s.done.CompareAndSwap(false, true) {
		s.hook() // which reads the record too: hence no sync.Once
	}
	return got, err
}

// TestTouchRacingStop: a use that read the record before a stop never
// writes it back as running — when a stop falls exactly between a touch's
// read and its write, and when many touches race one stop.
func TestTouchRacingStop(t *testing.T) {
	ctx := context.Background()
	t.Run("between read and write", func(t *testing.T) {
		st := &interleave{Store: memstore.New()}
		clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
		m, err := manager.New(ctx, &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: st, Now: clk.Now, WarmKernel: noWarm})
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.Create(ctx, "alice", manager.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		st.id = s.ID
		st.hook = func() {
			if err := m.Stop(ctx, "alice", s.ID); err != nil {
				t.Error(err)
			}
		}
		if _, err := m.Touch(ctx, "alice", s.ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("touch across a stop: %v, want %s", err, mcpbox.ESESSION)
		}
		if got, _ := st.Store.GetSession(ctx, s.ID); got.State != mcpbox.SessionStopped {
			t.Errorf("after a touch across a stop the record says %s", got.State)
		}
	})
	t.Run("many touches", func(t *testing.T) { manyTouches(t) })
}

func manyTouches(t *testing.T) {
	ctx := context.Background()
	for i := range 20 {
		m, rt, clk := newManager(t, manager.Options{})
		s, err := m.Create(ctx, "alice", manager.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					clk.Advance(2 * time.Second) // past the second Touch skips
					m.Touch(ctx, "alice", s.ID)
					time.Sleep(50 * time.Microsecond)
				}
			})
		}
		time.Sleep(time.Millisecond)
		if err := m.Stop(ctx, "alice", s.ID); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		got, err := m.Get(ctx, "alice", s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != mcpbox.SessionStopped || rt.Live() != 0 {
			t.Fatalf("round %d: after stop the record says %s with %d sandboxes: a touch brought it back", i, got.State, rt.Live())
		}
	}
}

// shared opens n managers on one store and one runtime: n mcpbox
// processes sharing a home.
func shared(t *testing.T, st mcpbox.Store, n int, opts manager.Options) ([]*manager.Manager, *testutil.FakeRuntime) {
	t.Helper()
	rt := testutil.NewFakeRuntime()
	var ms []*manager.Manager
	for i := range n {
		o := opts
		o.Runtime, o.Store, o.WarmKernel = rt, st, noWarm
		o.Holder = fmt.Sprintf("proc%d", i)
		m, err := manager.New(context.Background(), &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(context.Background()) })
		ms = append(ms, m)
	}
	return ms, rt
}

// TestLimitsAcrossProcesses: three processes on one SQLite file admit no
// more sessions than the limits, in total and per owner.
func TestLimitsAcrossProcesses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mcpbox.db")
	var stores []mcpbox.Store
	for range 3 {
		st, err := sqlite.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	rt := testutil.NewFakeRuntime()
	var ms []*manager.Manager
	for i, st := range stores {
		m, err := manager.New(context.Background(), &manager.Options{Runtime: rt, Store: st, WarmKernel: noWarm,
			MaxSessions: 7, MaxSessionsPerOwner: 4, Holder: fmt.Sprintf("p%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := map[string]int{}
	for i := range 30 {
		owner := []string{"alice", "bob"}[i%2]
		m := ms[i%3]
		wg.Go(func() {
			if _, err := m.Create(context.Background(), owner, manager.CreateRequest{}); err == nil {
				mu.Lock()
				made[owner]++
				mu.Unlock()
			} else if mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if made["alice"] > 4 || made["bob"] > 4 || made["alice"]+made["bob"] != 7 || rt.Live() != 7 {
		t.Errorf("made %v with %d sandboxes; want 7 in all, at most 4 each", made, rt.Live())
	}
}

// TestRecoverStates: recovery with sandboxes in every state, some looked
// after by a live process and some by a dead one. Only what no live lease
// covers is touched.
func TestRecoverStates(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	ms, rt := shared(t, st, 2, manager.Options{})
	live, rec := ms[0], ms[1]
	now := time.Now().UTC()

	// A record of each kind, with a sandbox where it should have one.
	cases := map[string]struct {
		holder  string
		state   mcpbox.SessionState
		sandbox bool
		alive   bool
		expired bool
		want    mcpbox.SessionState
		exists  bool // sandbox left afterwards
	}{
		"deadpooled":   {"dead", mcpbox.SessionPooled, true, true, false, "", false},
		"deadcreating": {"dead", mcpbox.SessionCreating, true, true, false, "", false},
		"deadrunning":  {"dead", mcpbox.SessionRunning, true, true, false, mcpbox.SessionRunning, true},
		"deadcrashed":  {"dead", mcpbox.SessionRunning, true, false, false, mcpbox.SessionStopped, false},
		"deadexpired":  {"dead", mcpbox.SessionRunning, true, true, true, mcpbox.SessionExpired, false},
		"deadstopping": {"dead", mcpbox.SessionStopping, true, true, false, mcpbox.SessionStopped, false},
		"livecreating": {live.Holder(), mcpbox.SessionCreating, true, true, false, mcpbox.SessionCreating, true},
		"livepooled":   {live.Holder(), mcpbox.SessionPooled, true, true, false, mcpbox.SessionPooled, true},
		"liverunning":  {live.Holder(), mcpbox.SessionRunning, true, false, false, mcpbox.SessionRunning, true},
		"deadnorecord": {"", "", true, true, false, "", false},
	}
	for id, c := range cases {
		if c.sandbox {
			if _, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id}); err != nil {
				t.Fatal(err)
			}
			if !c.alive {
				rt.Kill(id)
			}
		}
		if c.state == "" {
			continue
		}
		s := &mcpbox.Session{ID: id, Owner: "alice", State: c.state, Holder: c.holder, Created: now, LastUsed: now,
			ExpiresAt: now.Add(time.Hour), Sandbox: &mcpbox.Sandbox{ID: id}}
		if c.state == mcpbox.SessionPooled || (c.state == mcpbox.SessionCreating && c.holder == "dead") {
			s.Owner = ""
		}
		if c.expired {
			s.ExpiresAt = now.Add(-time.Minute)
		}
		if err := st.CreateSession(ctx, s, mcpbox.Admission{}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := rec.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, c := range cases {
		s, err := st.GetSession(ctx, id)
		switch {
		case c.want == "" && err == nil && s.State.Live():
			t.Errorf("%s: record left %s", id, s.State)
		case c.want != "" && err != nil:
			t.Errorf("%s: record gone, want %s", id, c.want)
		case c.want != "" && s.State != c.want:
			t.Errorf("%s: %s, want %s", id, s.State, c.want)
		}
		if has := rt.Dir(id) != ""; has != c.exists {
			t.Errorf("%s: sandbox exists = %v, want %v", id, has, c.exists)
		}
		if err == nil && c.holder == "dead" && c.want.Live() && s.Holder != rec.Holder() {
			t.Errorf("%s: adopted but held by %q, want %q", id, s.Holder, rec.Holder())
		}
	}
	sort.Strings(rep.Adopted)
	if fmt.Sprint(rep.Adopted) != "[deadrunning]" {
		t.Errorf("adopted %v, want [deadrunning]", rep.Adopted)
	}
	// The adopted session works through the recovering process.
	if err := rec.WriteFile(ctx, "alice", "deadrunning", "/workspace/x", []byte("ok")); err != nil {
		t.Errorf("use of the adopted session: %v", err)
	}
}

// TestMaintainerTakesOver: when the process that keeps the pools dies,
// another takes the maintainer lease, cleans up the dead one's pool
// sandboxes and keeps the pools filled; no sandbox in use is destroyed.
func TestMaintainerTakesOver(t *testing.T) {
	st := memstore.New()
	opts := manager.Options{LeaseTTL: 300 * time.Millisecond, Pools: []manager.PoolSpec{{Flavor: "small", Size: 2}}}
	ms, rt := shared(t, st, 2, opts)
	first, second := ms[0], ms[1]
	ctx1, die := context.WithCancel(context.Background())
	go first.Run(ctx1)
	waitFor(t, "the first process to fill the pool", func() bool { return first.PoolStats()["/small"] == 2 })
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go second.Run(ctx2)
	// A session made through the first, used through the second.
	s, err := first.Create(context.Background(), "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to refill", func() bool { return second.PoolStats()["/small"] == 2 })
	if err := second.WriteFile(context.Background(), "alice", s.ID, "/workspace/a", []byte("1")); err != nil {
		t.Fatalf("a session made by one process, used by another: %v", err)
	}
	// The first dies without a word: its leases run out.
	die()
	waitFor(t, "the second to take the session over", func() bool {
		got, err := st.GetSession(context.Background(), s.ID)
		return err == nil && got.Holder == second.Holder()
	})
	waitFor(t, "the pool to be full of the second's sandboxes", func() bool {
		recs, _ := st.ListSessions(context.Background(), mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
		n := 0
		for _, r := range recs {
			if r.Holder == second.Holder() {
				n++
			}
		}
		return n == 2
	})
	if b, err := second.ReadFile(context.Background(), "alice", s.ID, "/workspace/a"); err != nil || string(b) != "1" {
		t.Errorf("the session in use lost its file or its sandbox: %q, %v", b, err)
	}
	if live := rt.Live(); live != 3 {
		t.Errorf("%d sandboxes, want the session and a pool of 2", live)
	}
}

// TestSandboxDiedEndsSession: when a session's sandbox dies (killed,
// crashed), the next call ends the session and says so, instead of
// failing every call until the session's deadline.
func TestSandboxDiedEndsSession(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		use  func(m *manager.Manager, id string) error
	}{
		{"code", func(m *manager.Manager, id string) error {
			return m.ExecuteCode(ctx, "alice", id, manager.CodeRequest{Code: "1", Language: "shell"}, func(mcpbox.CodeEvent) {})
		}},
		{"command", func(m *manager.Manager, id string) error {
			_, err := m.RunCommand(ctx, "alice", id, manager.CommandRequest{Command: "true"}, nil)
			return err
		}},
		{"file", func(m *manager.Manager, id string) error {
			_, err := m.ReadFile(ctx, "alice", id, "/workspace/x")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, rt, _ := newManager(t, manager.Options{})
			s, err := m.Create(ctx, "alice", manager.CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.WriteFile(ctx, "alice", s.ID, "/workspace/x", []byte("1")); err != nil {
				t.Fatal(err)
			}
			rt.Kill(s.ID)
			err = tc.use(m, s.ID)
			if mcpbox.ErrorCode(err) != mcpbox.ESESSION || !strings.Contains(err.Error(), "stopped running") {
				t.Fatalf("a call to a session whose sandbox died: %v, want %s saying so", err, mcpbox.ESESSION)
			}
			if got, _ := m.Get(ctx, "alice", s.ID); got == nil || got.State != mcpbox.SessionStopped {
				t.Errorf("the session is %v, want stopped", got)
			}
			if rt.Live() != 0 {
				t.Errorf("%d sandboxes left: the dead one's leftovers were not destroyed", rt.Live())
			}
		})
	}
}

// TestStopAllLeavesOthers: a server stopping its sessions on exit leaves
// those another live process on the same store looks after.
func TestStopAllLeavesOthers(t *testing.T) {
	ctx := context.Background()
	ms, rt := shared(t, memstore.New(), 2, manager.Options{})
	mine, err := ms[0].Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := ms[1].Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ms[0].StopAll(ctx); err != nil || n != 1 {
		t.Fatalf("StopAll stopped %d, %v; want only its own 1", n, err)
	}
	if s, _ := ms[0].Get(ctx, "alice", mine.ID); s.State != mcpbox.SessionStopped {
		t.Errorf("its own session is %s", s.State)
	}
	if s, _ := ms[1].Get(ctx, "alice", theirs.ID); s.State != mcpbox.SessionRunning || rt.Live() != 1 {
		t.Errorf("the other process's session is %s, %d sandboxes left", s.State, rt.Live())
	}
}

// heldLease is a store whose lease calls, once armed, wait until release
// is closed, ignoring their context.
type heldLease struct {
	mcpbox.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldLease) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if h.armed.Load() {
		h.once.Do(func() { close(h.entered) })
		<-h.release
	}
	return h.Store.AcquireLease(ctx, name, holder, ttl)
}

// TestCloseWaitsForRun: Close does not return while Run is still in the
// store, so nothing of the manager uses the store its owner closes next.
func TestCloseWaitsForRun(t *testing.T) {
	st := &heldLease{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{})}
	ms, _ := shared(t, st, 1, manager.Options{})
	m := ms[0]
	st.armed.Store(true)
	ran := make(chan struct{})
	go func() { m.Run(context.Background()); close(ran) }()
	<-st.entered
	closed := make(chan struct{})
	go func() { m.Close(context.Background()); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while Run was still in the store")
	case <-time.After(100 * time.Millisecond):
	}
	close(st.release)
	<-closed
	<-ran
}
