package egress

import (
	"log"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpbox/mcpbox"
)

// maxRefusedHosts bounds the hosts a session's refusals are counted
// under; the rest count under "other", so a sandbox cannot grow the
// host's memory (or /metrics) by asking for ever new names.
const maxRefusedHosts = 32

type counters struct {
	conns, active, out, in, refused atomic.Int64

	mu    sync.Mutex
	hosts map[string]int64
}

func (c *counters) refuse(host string) {
	c.refused.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hosts == nil {
		c.hosts = map[string]int64{}
	}
	if _, ok := c.hosts[host]; !ok && len(c.hosts) >= maxRefusedHosts {
		host = "other"
	}
	if len(host) > 253 {
		host = host[:253]
	}
	c.hosts[host]++
}

func (c *counters) snapshot() mcpbox.NetworkStats {
	st := mcpbox.NetworkStats{Connections: c.conns.Load(), Active: c.active.Load(),
		BytesOut: c.out.Load(), BytesIn: c.in.Load(), Refused: c.refused.Load()}
	c.mu.Lock()
	if len(c.hosts) > 0 {
		st.RefusedHosts = maps.Clone(c.hosts)
	}
	c.mu.Unlock()
	return st
}

// Stats returns session's counters, zero when this proxy does not serve it.
func (p *Proxy) Stats(session string) mcpbox.NetworkStats {
	p.mu.Lock()
	s := p.sessions[session]
	p.mu.Unlock()
	if s == nil {
		return mcpbox.NetworkStats{}
	}
	return s.stats.snapshot()
}

// Collector exports every served session's counters to Prometheus.
func (p *Proxy) Collector() prometheus.Collector { return collector{p} }

type collector struct{ p *Proxy }

var (
	descConns   = prometheus.NewDesc("mcpbox_egress_connections_total", "Connections a session's sandbox opened to the egress proxy.", []string{"session"}, nil)
	descActive  = prometheus.NewDesc("mcpbox_egress_active_connections", "Open egress connections of a session.", []string{"session"}, nil)
	descBytes   = prometheus.NewDesc("mcpbox_egress_bytes_total", "Bytes a session sent (out) and received (in) through the egress proxy.", []string{"session", "direction"}, nil)
	descRefused = prometheus.NewDesc("mcpbox_egress_refusals_total", "Egress requests refused, by session and host.", []string{"session", "host"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConns
	ch <- descActive
	ch <- descBytes
	ch <- descRefused
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.Lock()
	all := make(map[string]*session, len(c.p.sessions))
	maps.Copy(all, c.p.sessions)
	c.p.mu.Unlock()
	for id, s := range all {
		st := s.stats.snapshot()
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.CounterValue, float64(st.Connections), id)
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(st.Active), id)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(st.BytesOut), id, "out")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(st.BytesIn), id, "in")
		for h, n := range st.RefusedHosts {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), id, h)
		}
	}
}

// rateLimiter is a token bucket shared by a session's connections; nil
// means unbounded.
type rateLimiter struct {
	mu     sync.Mutex
	rate   float64 // bytes per second
	tokens float64
	last   time.Time
}

func newRateLimiter(bytesPerSecond int64) *rateLimiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &rateLimiter{rate: float64(bytesPerSecond), tokens: float64(bytesPerSecond), last: time.Now()}
}

// wait takes n bytes' worth of tokens, sleeping off any debt: a burst of
// up to one second's worth passes at once.
func (l *rateLimiter) wait(n int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	l.tokens -= float64(n)
	debt := l.tokens
	l.mu.Unlock()
	if debt < 0 {
		time.Sleep(time.Duration(-debt / l.rate * float64(time.Second)))
	}
}

func newDiscardLog() *log.Logger { return log.New(discard{}, "", 0) }

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
