package manager_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// executePython runs 1+1 in the session's default Python context.
func executePython(b *testing.B, m *manager.Manager, id string) {
	rt, err := m.Agent(context.Background(), "bench", id)
	if err != nil {
		b.Fatal(err)
	}
	c := agentclient.New(rt)
	got := ""
	if err := c.Execute(context.Background(), agentclient.ExecuteRequest{Code: "1+1", Language: "python"}, func(ev mcpbox.CodeEvent) {
		if ev.Type == "result" {
			got = ev.Text
		}
	}); err != nil || got != "2" {
		b.Fatal(got, err)
	}
}

// BenchmarkSessionCreate measures a session from create until it has run
// Python, from a warm pool and cold, beside plain `python3 -c pass`.
func BenchmarkSessionCreate(b *testing.B) {
	b.Run("baseline=python3-c-pass", func(b *testing.B) {
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				if err := exec.Command("/usr/bin/python3", "-c", "pass").Run(); err != nil {
					b.Fatal(err)
				}
			})
		}
		t.Report(b)
	})
	for _, warm := range []bool{true, false} {
		name := "cold-create-python-ready"
		if warm {
			name = "warm-pool-create-python-ready"
		}
		b.Run(name, func(b *testing.B) {
			testutil.RequireRoot(b)
			rt, err := local.New(&local.Options{Home: testutil.Home(b)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opts := &manager.Options{Runtime: rt, Store: memstore.New(), MaxSessions: 64, MaxSessionsPerOwner: 64}
			if warm {
				opts.Pools = []manager.PoolSpec{{Flavor: "small", Size: 4}}
			}
			m, err := manager.New(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			go m.Run(ctx)
			var t testutil.Timings
			for b.Loop() {
				if warm { // a pool refills between real-world requests, not in a tight loop
					b.StopTimer()
					for deadline := time.Now().Add(10 * time.Second); m.PoolStats()["/small"] < 4 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
					b.StartTimer()
				}
				var id string
				t.Time(func() {
					s, err := m.Create(ctx, "bench", manager.CreateRequest{})
					if err != nil {
						b.Fatal(err)
					}
					id = s.ID
					executePython(b, m, id)
				})
				b.StopTimer()
				m.Stop(context.Background(), "bench", id)
				b.StartTimer()
			}
			t.Report(b)
		})
	}
}

// BenchmarkDoor measures what the door adds to a call: GET /health on a
// live session's agent, straight through the runtime's Dial, and through
// Manager.Agent (ownership, the session's record, the call count) on the
// same kind of connection.
func BenchmarkDoor(b *testing.B) {
	testutil.RequireRoot(b)
	rt, err := local.New(&local.Options{Home: testutil.Home(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(ctx)
	s, err := m.Create(ctx, "bench", manager.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	testutil.Track(s.ID)
	defer m.Stop(ctx, "bench", s.ID)
	direct := agentclient.ForSandbox(rt, s.ID)
	defer direct.Close()
	door, err := m.Agent(ctx, "bench", s.ID)
	if err != nil {
		b.Fatal(err)
	}
	viaDoor := agentclient.New(door)
	// Each iteration makes both calls, in turn, so that a noisy neighbour
	// weighs on both alike; the door's call includes Manager.Agent.
	var td, tm testutil.Timings
	for b.Loop() {
		td.Time(func() {
			if err := direct.Health(ctx); err != nil {
				b.Fatal(err)
			}
		})
		tm.Time(func() {
			if _, err := m.Agent(ctx, "bench", s.ID); err != nil {
				b.Fatal(err)
			}
			if err := viaDoor.Health(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.ReportMetric(float64(td.Percentile(50).Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(tm.Percentile(50).Microseconds()), "door-p50-µs")
	b.ReportMetric(float64((tm.Percentile(50) - td.Percentile(50)).Microseconds()), "added-p50-µs")
}
