package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// key makes an API key for owner on s's home with `mcpbox key create`.
func (s *server) key(t testing.TB, owner string) string {
	t.Helper()
	cmd := exec.Command(s.bin, "key", "create", "--owner", owner)
	cmd.Env = append(os.Environ(), "MCPBOX_HOME="+s.home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("key create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// e2bEnv points E2B's SDKs at s with key, as a user of mcpbox would.
func e2bEnv(s *server, key string) []string {
	return []string{"E2B_API_URL=" + s.url, "E2B_SANDBOX_URL=" + s.url, "E2B_API_KEY=" + key,
		// Debug mode would skip the API altogether.
		"E2B_DEBUG=false"}
}

// TestE2BSDK runs e2b.test.mjs: E2B's own JavaScript SDKs (e2b and
// @e2b/code-interpreter, pinned in package.json) against a real mcpbox
// serve, every call of their control plane, commands, files and code
// interpreter, pause and resume, two owners' isolation and the sessions
// MCP shares. It includes a command silent for over five minutes, which
// lives only on keepalives, so it takes that long.
func TestE2BSDK(t *testing.T) {
	testutil.RequireRoot(t)
	n := node(t)
	bin := build(t)
	s := serve(t, bin)
	a, b := s.key(t, "team-a"), s.key(t, "team-b")
	for _, k := range []string{a, b} {
		if !strings.HasPrefix(k, "e2b_") {
			t.Fatalf("key %q is not in E2B's shape", k)
		}
	}
	env := append(e2bEnv(s, a), "E2B_OTHER_KEY="+b, "E2B_LONG=1")
	out, err := run(t, 12*time.Minute, env, n, "--test", "--test-reporter=spec", "e2b.test.mjs")
	if err != nil {
		t.Fatalf("node --test e2b.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
