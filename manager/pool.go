package manager

import (
	"context"
	"time"

	"github.com/mcpbox/mcpbox"
)

// PoolSpec asks for Size sandboxes of one (template, flavor) kept ready.
type PoolSpec struct {
	Template string
	Flavor   string
	Size     int
}

// pool holds ready sandboxes for one (template, flavor). Its members count
// against MaxSessions, so a pool never pushes the server past its limit.
type pool struct {
	spec   PoolSpec
	flavor mcpbox.Flavor
	ready  []*mcpbox.Sandbox
	// filling counts sandboxes being made for the pool.
	filling int
	wake    chan struct{}
}

func poolKey(template, flavor string) string { return template + "\x00" + flavor }

// startPools makes the pools and their refill loops.
func (m *Manager) startPools(ctx context.Context, specs []PoolSpec) error {
	for _, spec := range specs {
		if spec.Size <= 0 {
			continue
		}
		fl, err := m.Flavor(spec.Flavor)
		if err != nil {
			return err
		}
		if spec.Flavor == "" {
			spec.Flavor = fl.Name
		}
		p := &pool{spec: spec, flavor: fl, wake: make(chan struct{}, 1)}
		m.pools[poolKey(spec.Template, spec.Flavor)] = p
		go m.refill(ctx, p)
	}
	return nil
}

// prestart is the kernel every sandbox starts as it boots, as a code
// interpreter's does: most sessions run Python first, and the interpreter
// then boots while the sandbox is still being set up.
var prestart = []mcpbox.Language{mcpbox.Python}

// refillDelay is how long a pool waits after a take before it refills.
const refillDelay = 50 * time.Millisecond

// refill keeps p at its size, one sandbox at a time, while the global
// limit leaves room; it sleeps until a sandbox is taken.
func (m *Manager) refill(ctx context.Context, p *pool) {
	p.wake <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		// The request that took a sandbox is about to run its first code
		// in it; making the next one now would take the CPU from it.
		// Takes within the delay are refilled together.
		select {
		case <-ctx.Done():
			return
		case <-time.After(refillDelay):
		}
		for m.reservePool(p) {
			sb, err := m.opts.Runtime.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: p.flavor, Volumes: m.opts.Volumes, Prestart: prestart})
			if err == nil && m.opts.WarmKernel != nil {
				// A warm sandbox has its default Python context running.
				if err = m.opts.WarmKernel(ctx, sb); err != nil {
					m.opts.Runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
				}
			}
			m.mu.Lock()
			p.filling--
			if err == nil {
				p.ready = append(p.ready, sb)
			}
			m.mu.Unlock()
			if err != nil {
				m.log.Warn("warm pool refill failed", "flavor", p.spec.Flavor, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// reservePool claims room for one more pool sandbox, if the pool is short
// and the global limit allows.
func (m *Manager) reservePool(p *pool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(p.ready)+p.filling >= p.spec.Size || m.totalLocked() >= m.opts.MaxSessions {
		return false
	}
	p.filling++
	return true
}

// takeWarmLocked hands out a ready sandbox for (template, flavor), or nil,
// and wakes the pool's refill.
func (m *Manager) takeWarmLocked(template, flavor string) *mcpbox.Sandbox {
	p := m.pools[poolKey(template, flavor)]
	if p == nil || len(p.ready) == 0 {
		return nil
	}
	sb := p.ready[0]
	p.ready = p.ready[1:]
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return sb
}

// PoolStats reports how many sandboxes each pool holds ready.
func (m *Manager) PoolStats() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, p := range m.pools {
		out[p.spec.Template+"/"+p.spec.Flavor] = len(p.ready)
	}
	return out
}

// drainPools destroys the pools' ready sandboxes (at shutdown).
func (m *Manager) drainPools(ctx context.Context) {
	m.mu.Lock()
	var all []*mcpbox.Sandbox
	for _, p := range m.pools {
		all = append(all, p.ready...)
		p.ready = nil
	}
	m.mu.Unlock()
	for _, sb := range all {
		m.opts.Runtime.Destroy(ctx, sb.ID)
	}
}
