// Package reexec is the TestMain of every test binary that creates real
// sandboxes: such a binary is re-executed as the sandbox's PID 1, exactly
// as the mcpbox binary is, and must become the sandbox's init before the
// tests would run.
package reexec

import (
	"fmt"
	"os"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// Init makes this process a sandbox's PID 1, never returning, when the
// runtime re-executed it as one; otherwise it returns at once.
func Init() {
	if local.IsInit(os.Args[1:]) {
		local.InitMain()
	}
}

// Main runs Init, then m's tests, then fails the binary if a sandbox a
// test made (see testutil.ID and testutil.Track) left anything behind.
func Main(m *testing.M) {
	Init()
	code := m.Run()
	if leaks := testutil.CheckLeaks(); len(leaks) > 0 {
		fmt.Fprintln(os.Stderr, "FAIL: sandboxes left things behind:")
		for _, l := range leaks {
			fmt.Fprintln(os.Stderr, "  ", l)
		}
		code = 1
	}
	os.Exit(code)
}
