package manager_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

// fakeEgress records what the manager tells the proxy.
type fakeEgress struct {
	mu      sync.Mutex
	changed []string
}

func (f *fakeEgress) Stats(id string) mcpbox.NetworkStats {
	return mcpbox.NetworkStats{Connections: 3, RefusedHosts: map[string]int64{"x.test": 1}, Refused: 1}
}

func (f *fakeEgress) PolicyChanged(id string) {
	f.mu.Lock()
	f.changed = append(f.changed, id)
	f.mu.Unlock()
}

func TestNetworkWithoutProxy(t *testing.T) {
	m, _, _ := newManager(t, manager.Options{})
	ctx := context.Background()
	_, err := m.Create(ctx, "alice", manager.CreateRequest{Network: &mcpbox.NetworkPolicy{Allow: []string{"pypi.org"}}})
	if mcpbox.ErrorCode(err) != mcpbox.EUNSUPPORTED || !strings.Contains(err.Error(), "egress proxy") {
		t.Fatalf("a policy without a proxy: %v", err)
	}
	// Asking for none is fine anywhere.
	if _, err := m.Create(ctx, "alice", manager.CreateRequest{Network: &mcpbox.NetworkPolicy{}}); err != nil {
		t.Fatal(err)
	}
}

func TestNetworkPolicy(t *testing.T) {
	eg := &fakeEgress{}
	m, _, _ := newManager(t, manager.Options{Egress: eg, DefaultNetwork: &mcpbox.NetworkPolicy{Allow: []string{"PyPI.org."}}})
	ctx := context.Background()

	t.Run("default", func(t *testing.T) {
		s, err := m.Create(ctx, "alice", manager.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.EgressPolicy(ctx, s.ID)
		if err != nil || got.String() != "allow pypi.org" {
			t.Fatalf("default policy: %v, %v", got, err)
		}
	})
	t.Run("bad pattern", func(t *testing.T) {
		_, err := m.Create(ctx, "alice", manager.CreateRequest{Network: &mcpbox.NetworkPolicy{Allow: []string{"pypi.org", "bad host"}}})
		if mcpbox.ErrorCode(err) != mcpbox.EINVALID || !strings.Contains(err.Error(), `"bad host"`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("set on a live session", func(t *testing.T) {
		s, err := m.Create(ctx, "alice", manager.CreateRequest{Network: &mcpbox.NetworkPolicy{Allow: []string{"*.Example.com"}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := m.EgressPolicy(ctx, s.ID); got.String() != "allow *.example.com" {
			t.Fatalf("created with %v", got)
		}
		if _, err := m.SetNetwork(ctx, "bob", s.ID, &mcpbox.NetworkPolicy{Public: true}); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Fatalf("another owner: %v", err)
		}
		n, err := m.SetNetwork(ctx, "alice", s.ID, &mcpbox.NetworkPolicy{Public: true, Deny: []string{"Evil.com"}})
		if err != nil || n.String() != "public; deny evil.com" {
			t.Fatalf("set: %v, %v", n, err)
		}
		if got, _ := m.EgressPolicy(ctx, s.ID); got.String() != "public; deny evil.com" {
			t.Fatalf("after set: %v", got)
		}
		eg.mu.Lock()
		told := strings.Join(eg.changed, ",")
		eg.mu.Unlock()
		if told != s.ID {
			t.Fatalf("the proxy was told %q", told)
		}
		if n, err := m.SetNetwork(ctx, "alice", s.ID, nil); err != nil || n != nil {
			t.Fatalf("taking it away: %v, %v", n, err)
		}
		if got, _ := m.EgressPolicy(ctx, s.ID); !got.None() {
			t.Fatalf("after taking it away: %v", got)
		}
		if st := m.NetworkStats(s.ID); st.Connections != 3 {
			t.Fatalf("stats: %+v", st)
		}
		if err := m.Stop(ctx, "alice", s.ID); err != nil {
			t.Fatal(err)
		}
		m.SetNetwork(ctx, "alice", s.ID, &mcpbox.NetworkPolicy{Public: true})
		if got, err := m.EgressPolicy(ctx, s.ID); got != nil || err != nil {
			t.Fatalf("a stopped session: %v, %v", got, err)
		}
		if got, err := m.EgressPolicy(ctx, "nosuchsession"); got != nil || err != nil {
			t.Fatalf("no session: %v, %v", got, err)
		}
	})
}

// BenchmarkEgressPolicy is what the egress proxy pays per request to
// read a session's policy from the SQLite store.
func BenchmarkEgressPolicy(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "mcpbox.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m, err := manager.New(context.Background(), &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: st, Egress: &fakeEgress{},
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Network: &mcpbox.NetworkPolicy{Allow: []string{"pypi.org", "files.pythonhosted.org"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop(ctx, "alice", s.ID)
	for b.Loop() {
		if p, err := m.EgressPolicy(ctx, s.ID); err != nil || p.None() {
			b.Fatal(p, err)
		}
	}
}
