// Package testutil holds helpers shared by mcpbox's tests.
package testutil

import (
	"crypto/rand"
	"os"
	"sync"
	"testing"
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

// ID returns a fresh random sandbox id, remembered for CheckLeaks.
func ID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	id := "t" + string(b)
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

// Home returns a fresh mcpbox state directory for t. It sits under /tmp,
// not t.TempDir(): the sandbox's mapped uid must be able to walk to its
// rootfs, and t.TempDir's parent is private to root.
func Home(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mcpbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
