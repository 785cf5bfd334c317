package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

func TestConfigShow(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(file, []byte("port: 9000\nmax_sessions: 70\n"), 0o644)
	t.Setenv("MCPBOX_MAX_SESSIONS", "90")
	code, out, errOut := runMain(t, testutil.Home(t), "", "config", "show", "--config", file, "--port", "9100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"port: 9100", "max_sessions: 90", "host: 127.0.0.1", "idle_timeout: 15m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("config show lacks %q:\n%s", want, out)
		}
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(file, []byte("max_ttl: 0s\n"), 0o644)
	code, _, errOut := runMain(t, testutil.Home(t), "", "serve", "--config", file)
	if code != 2 || !strings.Contains(errOut, "config max_ttl") {
		t.Errorf("exit %d, %q; want 2 naming max_ttl", code, errOut)
	}
	code, _, errOut = runMain(t, testutil.Home(t), "", "serve", "--port", "99999")
	if code != 2 || !strings.Contains(errOut, "config port") {
		t.Errorf("exit %d, %q; want 2 naming port", code, errOut)
	}
}
