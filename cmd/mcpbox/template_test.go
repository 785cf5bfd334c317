package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// TestTemplateCommands drives `mcpbox template` end to end: import an OCI
// layout, list, inspect, run code in it, refuse to remove it while a
// configured pool uses it, export and remove.
func TestTemplateCommands(t *testing.T) {
	testutil.RequireRoot(t)
	home := testutil.Home(t)
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(testutil.PythonImage(t)); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runMain(t, home, "", "template", "import", "pyimg", dir); code != 0 || out != "pyimg\n" || !strings.Contains(errOut, "layer 2/2") {
		t.Fatalf("import: %d %q %q", code, out, errOut)
	}
	code, out, _ := runMain(t, home, "", "template", "ls", "--json")
	var ts []mcpbox.Template
	if code != 0 || json.Unmarshal([]byte(out), &ts) != nil || len(ts) != 2 || ts[0].Name != "default" || ts[1].Name != "pyimg" || len(ts[1].Layers) != 2 {
		t.Fatalf("ls --json: %d %s", code, out)
	}
	if code, out, _ := runMain(t, home, "", "template", "ls"); code != 0 || !strings.Contains(out, "code-interpreter") || !strings.Contains(out, "mcpbox template build code-interpreter") {
		t.Errorf("ls shows recipes not built: %s", out)
	}
	if code, out, _ := runMain(t, home, "", "template", "inspect", "pyimg"); code != 0 || !strings.Contains(out, `"IMAGE_VAR": "from-image"`) {
		t.Errorf("inspect: %d %s", code, out)
	}
	if code, out, errOut := runMain(t, home, "", "run", "--template", "pyimg", "import imageonly; imageonly.VALUE"); code != 0 || out != "42\n" {
		t.Errorf("run --template: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runMain(t, home, "", "run", "--template", "nosuch", "1"); code != 2 || !strings.Contains(errOut, "default, pyimg") {
		t.Errorf("run --template nosuch: %d %q", code, errOut)
	}
	if code, _, errOut := runMain(t, home, "", "run", "--template", "code-interpreter-v1", "1"); code != 2 || !strings.Contains(errOut, "mcpbox template build code-interpreter") {
		t.Errorf("a recipe not built: %d %q", code, errOut)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("pools:\n  - template: pyimg\n    flavor: small\n    size: 1\n"), 0o600)
	if code, _, errOut := runMain(t, home, "", "template", "rm", "--config", cfg, "pyimg"); code == 0 || !strings.Contains(errOut, "warm pool pyimg/small") {
		t.Errorf("rm of a template a pool uses: %d %q", code, errOut)
	}
	out2 := filepath.Join(t.TempDir(), "export")
	if code, out, errOut := runMain(t, home, "", "template", "export", "pyimg", "--oci", out2); code != 0 || !strings.HasPrefix(out, "sha256:") {
		t.Errorf("export: %d %q %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(out2, "oci-layout")); err != nil {
		t.Errorf("export wrote no layout: %v", err)
	}
	if code, out, errOut := runMain(t, home, "", "template", "rm", "pyimg"); code != 0 || out != "pyimg\n" {
		t.Errorf("rm: %d %q %q", code, out, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "templates", "layers")); len(ents) != 0 {
		t.Errorf("%d layers left after rm", len(ents))
	}
}
