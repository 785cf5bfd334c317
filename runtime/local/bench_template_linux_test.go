package local_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// BenchmarkTemplateCreate measures creating a sandbox until its agent
// answers /health from the host template and from an imported image (two
// layers, Python in them), interleaved in one loop so that both see the
// same machine: each iteration creates one of each, in alternating order.
// Reported: p50 and p99 of each, and the median of the per-pair
// difference (template minus host).
func BenchmarkTemplateCreate(b *testing.B) {
	testutil.RequireRoot(b)
	home := testutil.Home(b)
	testutil.ImportPythonImage(b, home, "pyimg")
	rt, err := local.New(&local.Options{Home: home})
	if err != nil {
		b.Fatal(err)
	}
	fl, _ := mcpbox.LookupFlavor("small")
	for _, prestart := range []bool{false, true} {
		name := "interleaved"
		if prestart {
			name += "/prestart=python"
		}
		b.Run(name, func(b *testing.B) {
			var host, tmpl testutil.Timings
			var diffs []time.Duration
			create := func(template string, t *testutil.Timings) time.Duration {
				spec := mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: fl, Template: template}
				if prestart {
					spec.Prestart = []mcpbox.Language{mcpbox.Python}
				}
				start := time.Now()
				t.Time(func() {
					if _, err := rt.Create(context.Background(), spec); err != nil {
						b.Fatal(err)
					}
				})
				d := time.Since(start)
				b.StopTimer()
				if err := rt.Destroy(context.Background(), spec.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				return d
			}
			i := 0
			for b.Loop() {
				var dh, dt time.Duration
				if i%2 == 0 {
					dh = create("default", &host)
					dt = create("pyimg", &tmpl)
				} else {
					dt = create("pyimg", &tmpl)
					dh = create("default", &host)
				}
				i++
				diffs = append(diffs, dt-dh)
			}
			slices.Sort(diffs)
			b.ReportMetric(ms(host.Percentile(50)), "host-p50-ms")
			b.ReportMetric(ms(host.Percentile(99)), "host-p99-ms")
			b.ReportMetric(ms(tmpl.Percentile(50)), "template-p50-ms")
			b.ReportMetric(ms(tmpl.Percentile(99)), "template-p99-ms")
			b.ReportMetric(ms(diffs[len(diffs)/2]), "diff-p50-ms")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
