package mcpbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/mcpbox/mcpbox"

// layering is the import rules of DESIGN.md and STYLE.md: a package under
// pkg must not import any package under imports.
var layering = []struct{ pkg, imports string }{
	// The agent runs inside the sandbox: nothing of the host side.
	{mod + "/agent", mod + "/agentclient"},
	{mod + "/agent", mod + "/runtime"},
	{mod + "/agent", mod + "/manager"},
	{mod + "/agent", mod + "/store"},
	{mod + "/agent", mod + "/adapter"},
	{mod + "/agent", mod + "/cmd"},
	// Adapters reach sandboxes only through the manager's door: never a
	// runtime, a store, the agent client or the generated RPC code.
	{mod + "/adapter", mod + "/runtime"},
	{mod + "/adapter", mod + "/store"},
	{mod + "/adapter", mod + "/agentclient"},
	{mod + "/adapter", mod + "/gen"},
	{mod + "/adapter", mod + "/agent"},
	{mod + "/adapter", mod + "/internal/linux"},
	// Hosted MCP servers sit beside the adapters, above the manager: they
	// reach sandboxes only through its door, and adapters may use them.
	{mod + "/hosted", mod + "/runtime"},
	{mod + "/hosted", mod + "/store"},
	{mod + "/hosted", mod + "/agentclient"},
	{mod + "/hosted", mod + "/gen"},
	{mod + "/hosted", mod + "/agent"},
	{mod + "/hosted", mod + "/internal/linux"},
	{mod + "/hosted", mod + "/adapter"},
	{mod + "/manager", mod + "/hosted"},
	// The manager knows runtimes only through mcpbox.Runtime.
	{mod + "/manager", mod + "/runtime"},
	{mod + "/manager", mod + "/store/sqlite"},
	{mod + "/manager", mod + "/adapter"},
	{mod + "/manager", mod + "/internal/linux"},
	// Stores know nothing of sandboxes.
	{mod + "/store", mod + "/runtime"},
	{mod + "/store", mod + "/agent"},
	{mod + "/store", mod + "/agentclient"},
	// Runtimes sit below the manager and the adapters.
	{mod + "/runtime", mod + "/manager"},
	{mod + "/runtime", mod + "/adapter"},
	// The agent client talks to an agent; it knows nothing above it.
	{mod + "/agentclient", mod + "/manager"},
	{mod + "/agentclient", mod + "/runtime"},
}

// violations checks `go list` lines ("pkg import import …") against the
// rules, and the root package's rule: it imports nothing of ours.
func violations(lines []string) []string {
	var out []string
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		if pkg == mod {
			for _, imp := range imports {
				if strings.HasPrefix(imp, mod+"/") {
					out = append(out, "the root package imports "+imp+": it must import nothing of ours")
				}
			}
		}
		for _, rule := range layering {
			if !under(pkg, rule.pkg) {
				continue
			}
			for _, imp := range imports {
				if under(imp, rule.imports) {
					out = append(out, pkg+" imports "+imp+", which its layer must not")
				}
			}
		}
	}
	return out
}

// TestLayering keeps imports flowing down the tree (adapters → manager →
// runtime → agent), as DESIGN.md draws it.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, v := range violations(strings.Split(strings.TrimSpace(string(out)), "\n")) {
		t.Error(v)
	}
}

// TestLayeringCatches shows the rules bite: each line breaks one.
func TestLayeringCatches(t *testing.T) {
	for _, line := range []string{
		mod + "/adapter/e2b " + mod + "/agentclient",
		mod + "/adapter/mcpserver " + mod + "/gen/processpb",
		mod + "/adapter/httpserver " + mod + "/runtime/local",
		mod + "/agent/kernel " + mod + "/manager",
		mod + " " + mod + "/manager",
	} {
		if len(violations([]string{line})) == 0 {
			t.Errorf("%q passed the layering rules", line)
		}
	}
	if v := violations([]string{mod + "/adapter/mcpserver " + mod + " " + mod + "/manager"}); len(v) != 0 {
		t.Errorf("an adapter importing the manager and the domain was refused: %v", v)
	}
}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }
