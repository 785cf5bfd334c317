package httpserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mcpbox/mcpbox/manager"
)

// Metrics are mcpbox's Prometheus metrics.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, m *manager.Manager) *Metrics {
	x := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpbox_tool_calls_total",
			Help: "MCP tool calls by tool and outcome (ok or the error code)."}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mcpbox_tool_call_duration_seconds",
			Help:    "Duration of MCP tool calls.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"tool"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpbox_errors_total",
			Help: "Failed tool calls by error code."}, []string{"code"}),
	}
	reg.MustRegister(x.calls, x.duration, x.errors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mcpbox_sessions", Help: "Live sessions."},
			func() float64 { return float64(m.LiveSessions()) }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return x
}

// ToolCall records one tool call; it fits mcpserver.Options.OnCall.
func (x *Metrics) ToolCall(tool, code string, d time.Duration) {
	outcome := code
	if code == "" {
		outcome = "ok"
	} else {
		x.errors.WithLabelValues(code).Inc()
	}
	x.calls.WithLabelValues(tool, outcome).Inc()
	x.duration.WithLabelValues(tool).Observe(d.Seconds())
}
