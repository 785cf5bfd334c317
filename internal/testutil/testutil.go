// Package testutil holds helpers shared by mcpbox's tests.
package testutil

import (
	"os"
	"sync"
	"testing"

	"github.com/mcpbox/mcpbox"
)

// RequireRoot skips t, saying why, unless the test runs as root. CI runs
// as root, so these tests always run there.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (namespaces with a uid range, cgroups); CI runs it as root")
	}
}

var (
	idsMu sync.Mutex
	ids   []string
)

// ID returns a fresh random sandbox id, remembered for CheckLeaks. The
// "t" marks it as a test's.
func ID() string {
	id := "t" + mcpbox.NewID()[:16]
	idsMu.Lock()
	ids = append(ids, id)
	idsMu.Unlock()
	return id
}

// Track registers ids made elsewhere (by the manager, say) for CheckLeaks.
func Track(more ...string) {
	idsMu.Lock()
	ids = append(ids, more...)
	idsMu.Unlock()
}

// Home returns a fresh mcpbox state directory for t, private (0700) as
// a real one is. It sits directly under /tmp, not t.TempDir(): a sandbox's
// socket path must stay within the 108 bytes a Unix socket address holds.
func Home(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mcpbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
