package testutil

import (
	"slices"
	"testing"
	"time"
)

// Timings collects one duration per benchmark iteration and reports their
// median and 99th percentile: on a shared, noisy machine the mean that
// ns/op shows is pulled around by outliers.
type Timings struct{ d []time.Duration }

// Time runs f and records how long it took.
func (t *Timings) Time(f func()) {
	start := time.Now()
	f()
	t.d = append(t.d, time.Since(start))
}

// Percentile returns the p-th percentile (0..100) of the recorded timings.
func (t *Timings) Percentile(p float64) time.Duration {
	if len(t.d) == 0 {
		return 0
	}
	s := slices.Clone(t.d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// Report adds p50-ms and p99-ms metrics to b.
func (t *Timings) Report(b *testing.B) {
	b.ReportMetric(float64(t.Percentile(50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(t.Percentile(99).Microseconds())/1000, "p99-ms")
}
