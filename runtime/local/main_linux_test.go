package local_test

import (
	"os"
	"testing"

	"github.com/mcpbox/mcpbox/runtime/local"
)

// TestMain lets the test binary be a sandbox's PID 1, as the mcpbox binary
// is: the runtime re-executes /proc/self/exe with local.InitArg.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == local.InitArg {
		local.InitMain()
	}
	os.Exit(m.Run())
}
