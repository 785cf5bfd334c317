package local_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil/reexec"
)

// TestMain lets the test binary be a sandbox's PID 1, as the mcpbox binary
// is (the runtime re-executes /proc/self/exe with local.InitArgs), or the
// unprivileged half of TestRootless.
func TestMain(m *testing.M) {
	reexec.Init()
	if os.Getenv("MCPBOX_ROOTLESS_INNER") != "" {
		if err := rootlessInner(); err != nil {
			fmt.Fprintln(os.Stderr, "rootless:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// After the whole suite: nothing of any sandbox may be left.
	reexec.Main(m)
}
