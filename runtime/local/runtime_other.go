//go:build !linux

package local

import (
	"context"
	"net"
	"runtime"

	"github.com/mcpbox/mcpbox"
)

// Runtime is unavailable on this platform; every call says so.
type Runtime struct{}

var _ mcpbox.Runtime = (*Runtime)(nil)

func unsupported() error {
	return mcpbox.Errorf(mcpbox.EUNSUPPORTED, "the local runtime is unsupported on %s", runtime.GOOS).
		WithSuggestion("run mcpbox on Linux")
}

// New reports that the local runtime needs Linux.
func New(*Options) (*Runtime, error) { return nil, unsupported() }

// Create is unsupported on this platform.
func (*Runtime) Create(context.Context, mcpbox.SandboxSpec) (*mcpbox.Sandbox, error) {
	return nil, unsupported()
}

// Destroy is unsupported on this platform.
func (*Runtime) Destroy(context.Context, string) error { return unsupported() }

// List is unsupported on this platform.
func (*Runtime) List(context.Context) ([]*mcpbox.Sandbox, error) { return nil, unsupported() }

// InitMain is never reached on this platform.
func InitMain() { panic(unsupported()) }

// Pause is unsupported on this platform.
func (*Runtime) Pause(context.Context, string) error { return unsupported() }

// Resume is unsupported on this platform.
func (*Runtime) Resume(context.Context, string) error { return unsupported() }

// Dial is unsupported on this platform.
func (*Runtime) Dial(context.Context, string) (net.Conn, error) { return nil, unsupported() }
