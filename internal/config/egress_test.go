package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEgressKeys(t *testing.T) {
	c := Default()
	if c.Network != nil || c.EgressMaxConnectionsPerSession != 256 || c.EgressBytesPerSecond != 100<<20 {
		t.Fatalf("defaults: %+v %d %d", c.Network, c.EgressMaxConnectionsPerSession, c.EgressBytesPerSecond)
	}
	f := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(f, []byte("network:\n  allow: [pypi.org, \"*.githubusercontent.com\"]\n  deny: [evil.example.com]\negress_max_connections_per_session: 32\n"), 0o600)
	c, err := Load(f, []string{"MCPBOX_EGRESS_BYTES_PER_SECOND=1048576"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Network.String() != "allow pypi.org, *.githubusercontent.com; deny evil.example.com" || c.EgressMaxConnectionsPerSession != 32 || c.EgressBytesPerSecond != 1<<20 {
		t.Fatalf("loaded: %s %d %d", c.Network, c.EgressMaxConnectionsPerSession, c.EgressBytesPerSecond)
	}
	os.WriteFile(f, []byte("network:\n  allow: [\"bad host\"]\negress_max_connections_per_session: 0\n"), 0o600)
	c, err = Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "config network: ") || !strings.Contains(err.Error(), "config egress_max_connections_per_session: must be at least 1") {
		t.Fatalf("bad values: %v", err)
	}
}
