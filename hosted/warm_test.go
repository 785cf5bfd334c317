package hosted_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// hostedPool is PoolStats' name of the pool of hosted servers' sandboxes
// of the host template.
const hostedPool = "/small/ephemeral+no-kernel"

// waitUntil polls cond for up to 10s: pools fill in the background.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// pooled lists the ready pool sandboxes in st.
func pooled(t *testing.T, st mcpbox.Store) []string {
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

// sessionOf returns owner's one running session.
func sessionOf(t *testing.T, m *manager.Manager, owner string) string {
	t.Helper()
	list, err := m.List(context.Background(), owner, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}})
	if err != nil || len(list) != 1 {
		t.Fatalf("%s's running sessions: %v %v, want one", owner, list, err)
	}
	return list[0].ID
}

// Once a server has stopped, a sandbox of its template waits ready: its
// next start (or another owner's) takes it, as that owner's. A server
// with volumes takes none. Removing the last server that starts from the
// template, and Close, destroy the ready one; Hosts that only ever
// stopped their server at Close (one call's) never made one.
func TestWarmSandbox(t *testing.T) {
	ctx := context.Background()
	rt := testutil.NewFakeRuntime()
	st := memstore.New()
	root := t.TempDir()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: st, VolumeRoots: []string{root},
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	newH := func() *hosted.Hosts {
		h, err := hosted.New(&hosted.Options{Manager: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Add(pyDef(t, "py", nil)); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := newH()
	defer h.Close()
	if len(m.PoolStats()) != 0 {
		t.Errorf("a pool before any server started: %v", m.PoolStats())
	}
	call(t, h, "alice", "py", "count", nil)
	if len(m.PoolStats()) != 0 {
		t.Errorf("a pool while the only server runs: %v", m.PoolStats())
	}
	h.Stop("alice", "py")
	waitUntil(t, "a sandbox kept warm", func() bool { return m.PoolStats()[hostedPool] == 1 })

	// The next start takes it.
	ready := pooled(t, st)
	if got := call(t, h, "alice", "py", "count", nil); got != "1" {
		t.Errorf("count after a restart = %s, want a new server's 1", got)
	}
	if id := sessionOf(t, m, "alice"); !slices.Contains(ready, id) {
		t.Errorf("alice's server restarted in %s, not in the warm %v", id, ready)
	}

	// Another owner's start takes the next one, as its own.
	waitUntil(t, "the warm sandbox to be made again", func() bool { return m.PoolStats()[hostedPool] == 1 })
	ready = pooled(t, st)
	call(t, h, "bob", "py", "count", nil)
	bobs := sessionOf(t, m, "bob")
	if !slices.Contains(ready, bobs) {
		t.Errorf("bob's server started in %s, not in the warm %v", bobs, ready)
	}
	if _, err := m.Get(ctx, "alice", bobs); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("alice sees bob's session: %v", err)
	}

	// A server with volumes binds them at create: it takes no warm sandbox.
	waitUntil(t, "the warm sandbox to be made again", func() bool { return m.PoolStats()[hostedPool] == 1 })
	ready = pooled(t, st)
	vol := pyDef(t, "vol", nil)
	vol.Volumes = []string{root + ":/data"}
	if err := h.Add(vol); err != nil {
		t.Fatal(err)
	}
	call(t, h, "carol", "vol", "count", nil)
	if id := sessionOf(t, m, "carol"); slices.Contains(ready, id) {
		t.Errorf("a server with volumes started in warm sandbox %s", id)
	}
	if got := pooled(t, st); !slices.Equal(got, ready) {
		t.Errorf("warm sandboxes %v after a start with volumes, want %v untouched", got, ready)
	}

	// No server left to start from the host template without volumes:
	// the warm sandbox goes.
	if err := h.Remove("py"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the warm sandbox to go", func() bool { return len(pooled(t, st)) == 0 })

	// Close leaves nothing behind: servers, their sandboxes, warm ones.
	h.Close()
	h = newH()
	call(t, h, "alice", "py", "count", nil)
	h.Stop("alice", "py")
	call(t, h, "alice", "py", "count", nil)
	waitUntil(t, "a sandbox kept warm", func() bool { return m.PoolStats()[hostedPool] == 1 })
	h.Close()
	if n := len(pooled(t, st)); n != 0 {
		t.Errorf("%d warm sandboxes after Close", n)
	}
	if n := rt.Live(); n != 0 {
		t.Errorf("%d sandboxes live after Close", n)
	}

	// Hosts for one call: its server stops at Close, and nothing more.
	created := rt.Created
	h = newH()
	call(t, h, "alice", "py", "count", nil)
	h.Close()
	if rt.Created != created+1 || rt.Live() != 0 {
		t.Errorf("one call made %d sandboxes, %d left live; want 1 and none", rt.Created-created, rt.Live())
	}
}

// WarmSandboxes below zero keeps none.
func TestWarmSandboxOff(t *testing.T) {
	h, m := newHosts(t, hosted.Options{WarmSandboxes: -1})
	if err := h.Add(pyDef(t, "py", nil)); err != nil {
		t.Fatal(err)
	}
	call(t, h, "alice", "py", "count", nil)
	h.Stop("alice", "py")
	// A pool is registered before Stop returns: none is, or ever will be.
	if len(m.PoolStats()) != 0 {
		t.Errorf("pools with WarmSandboxes -1: %v", m.PoolStats())
	}
}

// With WarmAtStart, a sandbox waits ready for a server before it ever
// ran, and for one added later; its first start takes it.
func TestWarmAtStart(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	cat := &catalog{names: map[string]bool{"tools": true}}
	m, err := manager.New(ctx, &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: st, Templates: cat,
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	file := filepath.Join(t.TempDir(), "servers.json")
	h0, err := hosted.New(&hosted.Options{Manager: m, File: file})
	if err != nil {
		t.Fatal(err)
	}
	if err := h0.Add(pyDef(t, "py", nil)); err != nil {
		t.Fatal(err)
	}
	h0.Close()

	h, err := hosted.New(&hosted.Options{Manager: m, File: file, Templates: cat, WarmAtStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	waitUntil(t, "a sandbox warm before the first call", func() bool { return m.PoolStats()[hostedPool] == 1 })
	ready := pooled(t, st)
	call(t, h, "alice", "py", "count", nil)
	if id := sessionOf(t, m, "alice"); !slices.Contains(ready, id) {
		t.Errorf("the first start made %s instead of taking the warm %v", id, ready)
	}

	// A server added later, of another template, gets one of its own.
	other := pyDef(t, "other", nil)
	other.Template = "tools"
	if err := h.Add(other); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a sandbox warm for the server added", func() bool { return m.PoolStats()["tools/small/ephemeral+no-kernel"] == 1 })
}
