package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// BenchmarkTemplateSessionCreate measures a session from create until it
// has run Python (p50-ms, p99-ms), and Create alone (create-p50-ms), warm
// (from a pool) and cold, from the host template and from an imported
// image, side by side on one home.
func BenchmarkTemplateSessionCreate(b *testing.B) {
	testutil.RequireRoot(b)
	home := testutil.Home(b)
	testutil.ImportPythonImage(b, home, "pyimg")
	for _, warm := range []bool{true, false} {
		for _, tmpl := range []string{"", "pyimg"} {
			name := "cold"
			if warm {
				name = "warm-pool"
			}
			label := tmpl
			if label == "" {
				label = "default"
			}
			b.Run(name+"/template="+label, func(b *testing.B) {
				rt, err := local.New(&local.Options{Home: home})
				if err != nil {
					b.Fatal(err)
				}
				s, _ := rt.Templates()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				opts := &manager.Options{Runtime: rt, Store: memstore.New(), Templates: s, MaxSessions: 64, MaxSessionsPerOwner: 64}
				if warm {
					opts.Pools = []manager.PoolSpec{{Template: tmpl, Flavor: "small", Size: 4}}
				}
				m, err := manager.New(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close(context.Background())
				go m.Run(ctx)
				var t, created testutil.Timings
				for b.Loop() {
					if warm {
						b.StopTimer()
						for deadline := time.Now().Add(20 * time.Second); m.PoolStats()[tmpl+"/small"] < 4 && time.Now().Before(deadline); {
							time.Sleep(time.Millisecond)
						}
						b.StartTimer()
					}
					var id string
					t.Time(func() {
						created.Time(func() {
							s, err := m.Create(ctx, "bench", manager.CreateRequest{Template: tmpl})
							if err != nil {
								b.Fatal(err)
							}
							id = s.ID
						})
						executePython(b, m, id)
					})
					b.StopTimer()
					m.Stop(context.Background(), "bench", id)
					b.StartTimer()
				}
				t.Report(b)
				b.ReportMetric(float64(created.Percentile(50).Microseconds())/1000, "create-p50-ms")
			})
		}
	}
}
