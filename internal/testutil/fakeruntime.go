package testutil

import (
	"context"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
)

// FakeRuntime is an mcpbox.Runtime that creates nothing: it records what
// it was asked, so the manager and adapters can be tested without root.
type FakeRuntime struct {
	mu        sync.Mutex
	live      map[string]*mcpbox.Sandbox
	Created   int
	Destroyed []string
	// CreateErr, when set, fails every Create.
	CreateErr error
}

var _ mcpbox.Runtime = (*FakeRuntime)(nil)

// NewFakeRuntime returns an empty FakeRuntime.
func NewFakeRuntime() *FakeRuntime { return &FakeRuntime{live: map[string]*mcpbox.Sandbox{}} }

// Create records a sandbox.
func (f *FakeRuntime) Create(_ context.Context, spec mcpbox.SandboxSpec) (*mcpbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.CreateErr != nil {
		return nil, f.CreateErr
	}
	f.Created++
	sb := &mcpbox.Sandbox{ID: spec.ID, Flavor: spec.Flavor, Created: time.Now(),
		Endpoint: mcpbox.Endpoint{Network: "unix", Address: "/fake/" + spec.ID}}
	f.live[spec.ID] = sb
	return sb, nil
}

// Destroy forgets a sandbox.
func (f *FakeRuntime) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[id]; ok {
		f.Destroyed = append(f.Destroyed, id)
	}
	delete(f.live, id)
	return nil
}

// List returns the live sandboxes.
func (f *FakeRuntime) List(context.Context) ([]*mcpbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*mcpbox.Sandbox
	for _, sb := range f.live {
		out = append(out, sb)
	}
	return out, nil
}

// Live reports how many sandboxes exist.
func (f *FakeRuntime) Live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}
