package main

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/egress"
	"github.com/mcpbox/mcpbox/internal/config"
	"github.com/mcpbox/mcpbox/manager"
)

// policySource hands the egress proxy the manager's policies once the
// manager exists (the runtime, built first, needs the proxy).
type policySource struct {
	m atomic.Pointer[manager.Manager]
}

func (p *policySource) set(m *manager.Manager) { p.m.Store(m) }

func (p *policySource) policy(ctx context.Context, id string) (*mcpbox.NetworkPolicy, error) {
	m := p.m.Load()
	if m == nil {
		return nil, errors.New("mcpbox is still starting")
	}
	return m.EgressPolicy(ctx, id)
}

// newEgress starts the egress proxy sandboxes reach the network through,
// with the config's limits.
func newEgress(c config.Config, log *slog.Logger) (*egress.Proxy, *policySource, error) {
	src := &policySource{}
	p, err := egress.New(&egress.Options{
		Policy:             src.policy,
		MaxConnsPerSession: c.EgressMaxConnectionsPerSession,
		MaxConns:           c.EgressMaxConnections,
		BytesPerSecond:     c.EgressBytesPerSecond,
		Logger:             log,
	})
	return p, src, err
}

// metricsRegistry is the registry /metrics serves: the HTTP front's own
// metrics join the egress proxy's per-session counters there.
func metricsRegistry(p *egress.Proxy) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	if p != nil {
		reg.MustRegister(p.Collector())
	}
	return reg
}
