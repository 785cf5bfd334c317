package mcpbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering keeps imports flowing down the tree (adapters → manager →
// runtime → agent), as DESIGN.md draws it. A package on the left must not
// import any package under a prefix on the right.
func TestLayering(t *testing.T) {
	const mod = "github.com/mcpbox/mcpbox"
	forbidden := []struct{ pkg, imports string }{
		// The agent runs inside the sandbox: nothing of the host side.
		{mod + "/agent", mod + "/agentclient"},
		{mod + "/agent", mod + "/runtime"},
		{mod + "/agent", mod + "/manager"},
		{mod + "/agent", mod + "/store"},
		{mod + "/agent", mod + "/cmd"},
		// Adapters reach sandboxes only through the manager.
		{mod + "/adapter", mod + "/runtime"},
		{mod + "/adapter", mod + "/store"},
		// The manager knows runtimes only through mcpbox.Runtime.
		{mod + "/manager", mod + "/runtime"},
		{mod + "/manager", mod + "/store/sqlite"},
		// Stores know nothing of sandboxes.
		{mod + "/store", mod + "/runtime"},
		{mod + "/store", mod + "/agent"},
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		if pkg == mod {
			for _, imp := range imports {
				if strings.HasPrefix(imp, mod+"/") {
					t.Errorf("the root package imports %s: it must import nothing of ours", imp)
				}
			}
		}
		for _, rule := range forbidden {
			if !under(pkg, rule.pkg) {
				continue
			}
			for _, imp := range imports {
				if under(imp, rule.imports) {
					t.Errorf("%s imports %s, which its layer must not", pkg, imp)
				}
			}
		}
	}
}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }
