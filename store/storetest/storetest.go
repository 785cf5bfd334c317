// Package storetest is the conformance test every mcpbox.Store passes.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
)

var base = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func sess(id, owner string, age time.Duration) *mcpbox.Session {
	return &mcpbox.Session{
		ID: id, Owner: owner, State: mcpbox.SessionRunning,
		Flavor:   mcpbox.Flavors["small"],
		Env:      map[string]string{"A": "1"},
		Metadata: map[string]string{"team": owner},
		Created:  base.Add(age), LastUsed: base.Add(age), ExpiresAt: base.Add(time.Hour),
		IdleTimeout: 15 * time.Minute,
		Sandbox:     &mcpbox.Sandbox{ID: id, Flavor: mcpbox.Flavors["small"], Created: base},
		Holder:      "p1",
	}
}

// Run tests the Store that open returns (a fresh, empty one per call).
func Run(t *testing.T, open func(t *testing.T) mcpbox.Store) {
	ctx := context.Background()
	create := func(t *testing.T, s mcpbox.Store, x *mcpbox.Session) {
		t.Helper()
		if err := s.CreateSession(ctx, x, mcpbox.Admission{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("create get round trip", func(t *testing.T) {
		s := open(t)
		want := sess("a1", "alice", 0)
		create(t, s, want)
		if want.Revision != 1 {
			t.Errorf("revision after create = %d, want 1", want.Revision)
		}
		got, err := s.GetSession(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != "alice" || got.Env["A"] != "1" || !got.Created.Equal(want.Created) || got.Revision != 1 ||
			got.IdleTimeout != want.IdleTimeout || got.Sandbox.ID != "a1" || got.Flavor != want.Flavor || got.Holder != "p1" {
			t.Errorf("got %+v, want %+v", got, want)
		}
		got.Env["A"] = "changed"
		again, _ := s.GetSession(ctx, "a1")
		if again.Env["A"] != "1" {
			t.Error("a returned record shares memory with the store")
		}
		if err := s.CreateSession(ctx, sess("a1", "bob", 0), mcpbox.Admission{}); mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
			t.Errorf("second create of a1: %v, want %s", err, mcpbox.ECONFLICT)
		}
	})
	t.Run("missing is SESSION_NOT_FOUND", func(t *testing.T) {
		s := open(t)
		if _, err := s.GetSession(ctx, "nope"); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("err = %v, want %s", err, mcpbox.ESESSION)
		}
		if err := s.UpdateSession(ctx, sess("nope", "x", 0), nil); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("update of a missing record: %v, want %s", err, mcpbox.ESESSION)
		}
		if err := s.DeleteSession(ctx, "nope"); err != nil {
			t.Errorf("delete of a missing record: %v", err)
		}
	})
	t.Run("update is compare and swap", func(t *testing.T) {
		s := open(t)
		x := sess("u1", "alice", 0)
		create(t, s, x)
		a, _ := s.GetSession(ctx, "u1")
		b, _ := s.GetSession(ctx, "u1")
		a.State = mcpbox.SessionStopped
		if err := s.UpdateSession(ctx, a, nil); err != nil || a.Revision != 2 {
			t.Fatalf("first update: %v, revision %d", err, a.Revision)
		}
		b.LastUsed = base.Add(time.Minute)
		if err := s.UpdateSession(ctx, b, nil); mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
			t.Fatalf("stale update: %v, want %s", err, mcpbox.ECONFLICT)
		}
		if b.Revision != 1 {
			t.Errorf("a refused update changed the caller's revision to %d", b.Revision)
		}
		got, _ := s.GetSession(ctx, "u1")
		if got.State != mcpbox.SessionStopped || !got.LastUsed.Equal(base) {
			t.Errorf("after a lost race: %s, last used %v: the stale write got through", got.State, got.LastUsed)
		}
	})
	t.Run("admission", func(t *testing.T) {
		s := open(t)
		lim := mcpbox.Admission{MaxTotal: 3, MaxPerOwner: 2}
		for i, owner := range []string{"alice", "alice"} {
			if err := s.CreateSession(ctx, sess(fmt.Sprintf("a%d", i), owner, 0), lim); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CreateSession(ctx, sess("a9", "alice", 0), lim); mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
			t.Fatalf("alice's third: %v, want %s", err, mcpbox.ELIMIT)
		}
		if _, err := s.GetSession(ctx, "a9"); err == nil {
			t.Error("a refused create left a record")
		}
		pooled := sess("p0", "", 0)
		pooled.State = mcpbox.SessionPooled
		if err := s.CreateSession(ctx, pooled, lim); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSession(ctx, sess("b0", "bob", 0), lim); mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
			t.Fatalf("fourth live record: %v, want %s", err, mcpbox.ELIMIT)
		}
		// Claiming the pooled one for alice breaks her limit; for bob it is
		// room the pool already held.
		pooled.Owner, pooled.State = "alice", mcpbox.SessionRunning
		if err := s.UpdateSession(ctx, pooled, &lim); mcpbox.ErrorCode(err) != mcpbox.ELIMIT {
			t.Fatalf("claim for alice: %v, want %s", err, mcpbox.ELIMIT)
		}
		pooled.Owner = "bob"
		if err := s.UpdateSession(ctx, pooled, &lim); err != nil {
			t.Fatalf("claim for bob: %v", err)
		}
		// Ended records do not count.
		a0, _ := s.GetSession(ctx, "a0")
		a0.State = mcpbox.SessionStopped
		if err := s.UpdateSession(ctx, a0, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSession(ctx, sess("a5", "alice", 0), lim); err != nil {
			t.Fatalf("after a stop: %v", err)
		}
	})
	t.Run("list filters and order", func(t *testing.T) {
		s := open(t)
		create(t, s, sess("b2", "bob", 2*time.Second))
		create(t, s, sess("a1", "alice", time.Second))
		stopped := sess("a3", "alice", 3*time.Second)
		stopped.State = mcpbox.SessionStopped
		create(t, s, stopped)
		for _, tc := range []struct {
			f    mcpbox.SessionFilter
			want string
		}{
			{mcpbox.SessionFilter{}, "[a1 b2 a3]"},
			{mcpbox.SessionFilter{Owner: "alice"}, "[a1 a3]"},
			{mcpbox.SessionFilter{Owner: "alice", States: []mcpbox.SessionState{mcpbox.SessionRunning}}, "[a1]"},
			{mcpbox.SessionFilter{Metadata: map[string]string{"team": "bob"}}, "[b2]"},
			{mcpbox.SessionFilter{Owner: "carol"}, "[]"},
		} {
			list, err := s.ListSessions(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, x := range list {
				ids = append(ids, x.ID)
				if x.Revision != 1 {
					t.Errorf("%s listed at revision %d, want 1", x.ID, x.Revision)
				}
			}
			if got := fmt.Sprint(ids); got != tc.want && !(tc.want == "[]" && len(ids) == 0) {
				t.Errorf("filter %+v: %s, want %s", tc.f, got, tc.want)
			}
		}
		s.DeleteSession(ctx, "a1")
		if list, _ := s.ListSessions(ctx, mcpbox.SessionFilter{Owner: "alice"}); len(list) != 1 {
			t.Errorf("after delete: %d of alice's left, want 1", len(list))
		}
	})
	t.Run("leases", func(t *testing.T) {
		s := open(t)
		got := func(name, holder string, ttl time.Duration) bool {
			ok, err := s.AcquireLease(ctx, name, holder, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !got("leader", "p1", time.Hour) {
			t.Fatal("a free lease was refused")
		}
		if got("leader", "p2", time.Hour) {
			t.Fatal("a held lease went to another holder")
		}
		if !got("leader", "p1", time.Hour) {
			t.Fatal("the holder could not renew")
		}
		if h, exp, _ := s.Lease(ctx, "leader"); h != "p1" || !exp.After(time.Now()) {
			t.Errorf("Lease = %q, %v", h, exp)
		}
		s.ReleaseLease(ctx, "leader", "p2") // not p2's: stays
		if h, _, _ := s.Lease(ctx, "leader"); h != "p1" {
			t.Errorf("another holder's release took the lease from p1 (now %q)", h)
		}
		s.ReleaseLease(ctx, "leader", "p1")
		if !got("leader", "p2", -time.Second) { // taken, and expired at once
			t.Fatal("a released lease was refused")
		}
		if !got("leader", "p3", time.Hour) {
			t.Fatal("an expired lease was refused")
		}
		if h, _, _ := s.Lease(ctx, "unknown"); h != "" {
			t.Errorf("unknown lease held by %q", h)
		}
	})
}

// RunShared tests two handles on one store (two processes on one SQLite
// file): compare-and-swap never loses a write and admission holds across
// them. open returns both handles of a fresh, empty store.
func RunShared(t *testing.T, open func(t *testing.T) (mcpbox.Store, mcpbox.Store)) {
	ctx := context.Background()
	t.Run("no lost update", func(t *testing.T) {
		a, b := open(t)
		x := sess("cas1", "alice", 0)
		x.Metadata = map[string]string{}
		if err := a.CreateSession(ctx, x, mcpbox.Admission{}); err != nil {
			t.Fatal(err)
		}
		// Each writer adds its own key by read-modify-CAS, retrying on
		// conflict: with no lost update every key is there at the end.
		const writers, each = 8, 10
		var wg sync.WaitGroup
		for w := range writers {
			st := a
			if w%2 == 1 {
				st = b
			}
			wg.Go(func() {
				for i := range each {
					for {
						cur, err := st.GetSession(ctx, "cas1")
						if err != nil {
							t.Error(err)
							return
						}
						if cur.Metadata == nil {
							cur.Metadata = map[string]string{}
						}
						cur.Metadata[fmt.Sprintf("w%d-%d", w, i)] = "x"
						err = st.UpdateSession(ctx, cur, nil)
						if err == nil {
							break
						}
						if mcpbox.ErrorCode(err) != mcpbox.ECONFLICT {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		got, err := b.GetSession(ctx, "cas1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Metadata) != writers*each || got.Revision != 1+writers*each {
			t.Errorf("%d keys at revision %d, want %d at %d: a write was lost", len(got.Metadata), got.Revision, writers*each, 1+writers*each)
		}
	})
	t.Run("admission across handles", func(t *testing.T) {
		a, b := open(t)
		lim := mcpbox.Admission{MaxTotal: 5, MaxPerOwner: 5}
		var wg sync.WaitGroup
		var mu sync.Mutex
		made := 0
		for i := range 20 {
			st := a
			if i%2 == 1 {
				st = b
			}
			wg.Go(func() {
				err := st.CreateSession(ctx, sess(fmt.Sprintf("lim%d", i), "alice", 0), lim)
				switch mcpbox.ErrorCode(err) {
				case "":
					mu.Lock()
					made++
					mu.Unlock()
				case mcpbox.ELIMIT:
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		live, _ := a.ListSessions(ctx, mcpbox.SessionFilter{States: mcpbox.LiveStates})
		if made != 5 || len(live) != 5 {
			t.Errorf("%d admitted, %d live; want 5 and 5", made, len(live))
		}
	})
}
