package manager_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// pausingRuntime is the fake runtime with a freezer that records what it
// froze.
type pausingRuntime struct {
	*testutil.FakeRuntime
	mu     sync.Mutex
	frozen map[string]bool
}

func (p *pausingRuntime) Pause(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen[id] = true
	return nil
}

func (p *pausingRuntime) Resume(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.frozen, id)
	return nil
}

func (p *pausingRuntime) isFrozen(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen[id]
}

func newPausing(t *testing.T) (*manager.Manager, *pausingRuntime, *clock) {
	t.Helper()
	rt := &pausingRuntime{FakeRuntime: testutil.NewFakeRuntime(), frozen: map[string]bool{}}
	// The real time: the sandbox's agent judges its own deadline by it.
	clk := &clock{now: time.Now().UTC()}
	m, err := manager.New(context.Background(), &manager.Options{Runtime: rt, Store: memstore.New(), Now: clk.Now, MaxTTL: 24 * time.Hour,
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.StopAll(context.Background()) })
	return m, rt, clk
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	m, rt, clk := newPausing(t)
	s, err := m.Create(ctx, "alice", manager.CreateRequest{TTL: 10 * time.Minute, IdleTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, "bob", s.ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("bob paused alice's session: %v", err)
	}
	if _, err := m.Pause(ctx, "alice", s.ID); err != nil || !rt.isFrozen(s.ID) {
		t.Fatalf("pause: %v, frozen %v", err, rt.isFrozen(s.ID))
	}
	if _, err := m.Pause(ctx, "alice", s.ID); mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
		t.Errorf("a second pause: %v, want CONFLICT", err)
	}
	if _, err := m.Agent(ctx, "alice", s.ID); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("the door of a paused session: %v", err)
	}
	// Paused for an hour: past its TTL and idle timeout, but neither runs.
	clk.Advance(time.Hour)
	if n, err := m.Reap(ctx); err != nil || n != 0 {
		t.Errorf("reaped %d paused sessions (%v)", n, err)
	}
	got, err := m.Resume(ctx, "alice", s.ID)
	if err != nil || rt.isFrozen(s.ID) || got.State != mcpbox.SessionRunning {
		t.Fatalf("resume: %+v %v", got, err)
	}
	if left := got.Deadline().Sub(clk.Now()); left != 10*time.Minute {
		t.Errorf("%v left after resuming, want the 10 minutes it had", left)
	}
	if _, err := m.Agent(ctx, "alice", s.ID); err != nil {
		t.Errorf("the door after resume: %v", err)
	}
	if _, err := m.Resume(ctx, "alice", s.ID); mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
		t.Errorf("resume of a running session: %v, want CONFLICT", err)
	}
	// Stopping a paused session thaws and destroys it.
	m.Pause(ctx, "alice", s.ID)
	if err := m.Stop(ctx, "alice", s.ID); err != nil || rt.isFrozen(s.ID) {
		t.Errorf("stop of a paused session: %v, frozen %v", err, rt.isFrozen(s.ID))
	}
}

func TestAutoPause(t *testing.T) {
	ctx := context.Background()
	m, rt, clk := newPausing(t)
	s, err := m.Create(ctx, "alice", manager.CreateRequest{TTL: 5 * time.Minute, AutoPause: true})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Minute)
	if n, err := m.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	if got, _ := m.Get(ctx, "alice", s.ID); got.State != mcpbox.SessionPaused || !rt.isFrozen(s.ID) {
		t.Fatalf("at its deadline an autoPause session is %s (frozen %v), want paused", got.State, rt.isFrozen(s.ID))
	}
	// Paused for the maximum TTL, it ends.
	clk.Advance(24 * time.Hour)
	if n, err := m.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	if got, _ := m.Get(ctx, "alice", s.ID); got.State != mcpbox.SessionExpired {
		t.Errorf("paused for the maximum TTL, the session is %s", got.State)
	}
	// Without a freezer there is no autoPause.
	plain, _, _ := newManager(t, manager.Options{})
	if _, err := plain.Create(ctx, "alice", manager.CreateRequest{AutoPause: true}); mcpbox.ErrorCode(err) != mcpbox.EUNSUPPORTED {
		t.Errorf("autoPause on a runtime that cannot pause: %v", err)
	}
}

// A paused session whose process died is adopted while its sandbox lives
// (its frozen agent cannot answer a health check: the runtime's word is
// taken), and ended when the sandbox is gone.
func TestRecoverPaused(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	ms, rt := shared(t, st, 1, manager.Options{})
	rec := ms[0]
	now := time.Now().UTC()
	for id, alive := range map[string]bool{"pausedalive": true, "pausedgone": false} {
		if _, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id}); err != nil {
			t.Fatal(err)
		}
		if !alive {
			rt.Kill(id)
		}
		s := &mcpbox.Session{ID: id, Owner: "alice", State: mcpbox.SessionPaused, PausedAt: now, Holder: "dead",
			Created: now, LastUsed: now, ExpiresAt: now.Add(time.Hour), Sandbox: &mcpbox.Sandbox{ID: id}}
		if err := st.CreateSession(ctx, s, mcpbox.Admission{}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := rec.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0] != "pausedalive" {
		t.Errorf("adopted %v, want [pausedalive]", rep.Adopted)
	}
	if s, _ := st.GetSession(ctx, "pausedalive"); s.State != mcpbox.SessionPaused || s.Holder != rec.Holder() || rt.Dir("pausedalive") == "" {
		t.Errorf("the live paused session: %s, held by %q, sandbox %q", s.State, s.Holder, rt.Dir("pausedalive"))
	}
	if s, _ := st.GetSession(ctx, "pausedgone"); s.State != mcpbox.SessionStopped || rt.Dir("pausedgone") != "" {
		t.Errorf("the paused session whose sandbox died: %s, sandbox %q", s.State, rt.Dir("pausedgone"))
	}
}
