package local_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil"

	"github.com/mcpbox/mcpbox/runtime/local"
)

// TestMain lets the test binary be a sandbox's PID 1, as the mcpbox binary
// is: the runtime re-executes /proc/self/exe with local.InitArg.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == local.InitArg {
		local.InitMain()
	}
	if os.Getenv("MCPBOX_ROOTLESS_INNER") != "" {
		if err := rootlessInner(); err != nil {
			fmt.Fprintln(os.Stderr, "rootless:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	// After the whole suite: nothing of any sandbox may be left.
	if leaks := testutil.CheckLeaks(); len(leaks) > 0 {
		fmt.Fprintln(os.Stderr, "FAIL: sandboxes left things behind:")
		for _, l := range leaks {
			fmt.Fprintln(os.Stderr, "  ", l)
		}
		code = 1
	}
	os.Exit(code)
}
