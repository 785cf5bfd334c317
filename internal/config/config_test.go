package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/config"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	file := write(t, "port: 9000\nmax_sessions: 50\nidle_timeout: 5m\nflavors:\n  tiny: {cpus: 0.5, memory_mb: 256, disk_mb: 256, pids: 64}\n")
	c, err := config.Load(file, []string{"MCPBOX_PORT=9100", "MCPBOX_STOP_SESSIONS_ON_EXIT=true", "UNRELATED=1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 9100 || c.MaxSessions != 50 || c.IdleTimeout != 5*time.Minute || !c.StopSessionsOnExit || c.Host != "127.0.0.1" {
		t.Errorf("effective config %+v", c)
	}
	if f := c.Flavors["tiny"].Flavor("tiny"); f.MemoryBytes != 256<<20 || f.CPUs != 0.5 {
		t.Errorf("custom flavor %+v", f)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if !strings.Contains(c.YAML(), "port: 9100") {
		t.Errorf("YAML() lacks the effective port:\n%s", c.YAML())
	}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        []string
		want       string
	}{
		{"unknown key", "prot: 80\n", nil, "prot"},
		{"bad env int", "", []string{"MCPBOX_PORT=eighty"}, "MCPBOX_PORT"},
		{"bad env duration", "", []string{"MCPBOX_IDLE_TIMEOUT=soon"}, "MCPBOX_IDLE_TIMEOUT"},
		{"port range", "port: 70000\n", nil, "config port"},
		{"zero limit", "max_sessions: 0\n", nil, "config max_sessions"},
		{"per owner above total", "max_sessions: 5\nmax_sessions_per_owner: 10\n", nil, "config max_sessions_per_owner"},
		{"ttl order", "default_ttl: 48h\n", nil, "config default_ttl"},
		{"log level", "log_level: loud\n", nil, "config log_level"},
		{"bad flavor", "flavors:\n  tiny: {cpus: 0, memory_mb: 256, disk_mb: 256, pids: 64}\n", nil, "config flavors.tiny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := ""
			if tc.file != "" {
				file = write(t, tc.file)
			}
			c, err := config.Load(file, tc.env)
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := config.Load("/nonexistent/config.yaml", nil); err == nil {
		t.Error("a named config file that does not exist was accepted")
	}
}
