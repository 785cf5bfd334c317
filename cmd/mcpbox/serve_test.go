package main

import (
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// TestServeRefusesOpenAddressWithoutKey: with no API key, anyone who
// reaches a non-loopback address could run code, so serve will not listen
// there unless told --insecure.
func TestServeRefusesOpenAddressWithoutKey(t *testing.T) {
	testutil.RequireRoot(t)
	home := testutil.Home(t)
	code, _, stderr := runMain(t, home, "", "serve", "--host", "0.0.0.0", "--port", "0")
	if code != exitUsage || !strings.Contains(stderr, "no API key") || !strings.Contains(stderr, "--insecure") {
		t.Fatalf("serve on 0.0.0.0 without keys: exit %d, %q; want exit %d naming the fix", code, stderr, exitUsage)
	}
}
