package hosted_test

import (
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil/reexec"
)

// TestMain lets the test binary be a sandbox's PID 1, as the mcpbox
// binary is, for the tests that run servers in real sandboxes.
func TestMain(m *testing.M) { reexec.Main(m) }
