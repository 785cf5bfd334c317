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

// Run tests the Store that open returns (a fresh, empty one per call).
func Run(t *testing.T, open func(t *testing.T) mcpbox.Store) {
	ctx := context.Background()
	base := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	sess := func(id, owner string, age time.Duration) *mcpbox.Session {
		return &mcpbox.Session{
			ID: id, Owner: owner, State: mcpbox.SessionRunning,
			Flavor:   mcpbox.Flavors["small"],
			Env:      map[string]string{"A": "1"},
			Metadata: map[string]string{"team": owner},
			Created:  base.Add(age), LastUsed: base.Add(age), ExpiresAt: base.Add(time.Hour),
			IdleTimeout: 15 * time.Minute,
			Sandbox:     &mcpbox.Sandbox{ID: id, Endpoint: mcpbox.Endpoint{Network: "unix", Address: "/x/" + id}},
		}
	}
	t.Run("put get round trip", func(t *testing.T) {
		s := open(t)
		want := sess("a1", "alice", 0)
		if err := s.PutSession(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSession(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != "alice" || got.Env["A"] != "1" || !got.Created.Equal(want.Created) ||
			got.IdleTimeout != want.IdleTimeout || got.Sandbox.Endpoint.Address != "/x/a1" || got.Flavor != want.Flavor {
			t.Errorf("got %+v, want %+v", got, want)
		}
		got.Env["A"] = "changed"
		again, _ := s.GetSession(ctx, "a1")
		if again.Env["A"] != "1" {
			t.Error("a returned record shares memory with the store")
		}
	})
	t.Run("missing is SESSION_NOT_FOUND", func(t *testing.T) {
		s := open(t)
		if _, err := s.GetSession(ctx, "nope"); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("err = %v, want %s", err, mcpbox.ESESSION)
		}
		if err := s.DeleteSession(ctx, "nope"); err != nil {
			t.Errorf("delete of a missing record: %v", err)
		}
	})
	t.Run("list filters and order", func(t *testing.T) {
		s := open(t)
		s.PutSession(ctx, sess("b2", "bob", 2*time.Second))
		s.PutSession(ctx, sess("a1", "alice", time.Second))
		stopped := sess("a3", "alice", 3*time.Second)
		stopped.State = mcpbox.SessionStopped
		s.PutSession(ctx, stopped)
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
	t.Run("concurrent writers", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := sess(fmt.Sprintf("c%d", i), "carol", time.Duration(i)*time.Second)
				if err := s.PutSession(ctx, x); err != nil {
					t.Error(err)
				}
				x.State = mcpbox.SessionStopped
				if err := s.PutSession(ctx, x); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		list, err := s.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionStopped}})
		if err != nil || len(list) != 32 {
			t.Errorf("%d stopped sessions, %v; want 32", len(list), err)
		}
	})
}
