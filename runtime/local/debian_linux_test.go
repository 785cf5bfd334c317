package local_test

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/template"
)

// cachedRuntime is a runtime on a home kept between test runs
// ($MCPBOX_TEST_CACHE, default /var/cache/mcpbox-test): Debian templates
// take minutes to build and are built there once.
func cachedRuntime(t *testing.T) *local.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	dir := os.Getenv("MCPBOX_TEST_CACHE")
	if dir == "" {
		dir = "/var/cache/mcpbox-test"
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	rt, err := local.New(&local.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// builtTemplate returns template name from rt's store, building it from
// this machine's apt mirror the first time.
func builtTemplate(t *testing.T, rt *local.Runtime, name string, pkgs ...string) *mcpbox.Template {
	t.Helper()
	s, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	if tm, err := s.Get(name); err == nil {
		return tm
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			t.Skip("needs mmdebstrap or debootstrap to build a Debian template (scripts/deps.sh installs mmdebstrap)")
		}
	}
	var last []string
	tm, err := s.Build(context.Background(), name, &template.BuildOptions{Packages: pkgs}, func(m string) {
		if last = append(last, m); len(last) > 20 {
			last = last[1:]
		}
	})
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, strings.Join(last, "\n"))
	}
	t.Logf("built %s: %.0f MB (%s)", name, float64(tm.Size)/1e6, last[len(last)-1])
	return tm
}

// TestDebianTemplate builds a small Debian template with a Python
// package the host does not have, and imports it in a sandbox.
func TestDebianTemplate(t *testing.T) {
	rt := cachedRuntime(t)
	tm := builtTemplate(t, rt, "test-debian-toolz", "python3-toolz")
	if !tm.Has(mcpbox.Python) || !strings.HasPrefix(tm.Source, "debian:") {
		t.Fatalf("%+v", tm)
	}
	if exec.Command("python3", "-c", "import toolz").Run() == nil {
		t.Log("note: the host has toolz too; the sandbox's comes from the template all the same (no host /usr in it)")
	}
	_, c := newTemplateSandbox(t, rt, tm.Name)
	out, errOut, res := run(t, c, 30*time.Second, "python3", "-c", "import toolz, sys; print(toolz.__file__, sys.prefix)")
	if res.ExitCode != 0 || !strings.HasPrefix(out, "/usr/lib/python3/dist-packages/toolz/") {
		t.Errorf("toolz in the Debian template: %q (stderr %q) exit %d", out, errOut, res.ExitCode)
	}
	if out, _, _ := run(t, c, 10*time.Second, "sh", "-c", "ls /usr/bin/node 2>/dev/null; . /etc/os-release; echo $ID"); out != "debian\n" {
		t.Errorf("the sandbox sees more than the template: %q", out)
	}
}

// TestCodeInterpreterTemplate builds the code-interpreter recipe: a
// matplotlib plot comes back as a PNG with nothing on stderr, pandas
// works, and so does Node.
func TestCodeInterpreterTemplate(t *testing.T) {
	// The first run on a machine builds the recipe from the apt mirror
	// (some 250 MB of packages, a few minutes); later runs find it in the
	// test cache.
	rt := cachedRuntime(t)
	tm := builtTemplate(t, rt, "code-interpreter")
	for _, l := range []mcpbox.Language{mcpbox.Python, mcpbox.JavaScript} {
		if !tm.Has(l) {
			t.Errorf("code-interpreter lacks %s: %v", l, tm.Languages)
		}
	}
	sb, c := newTemplateSandbox(t, rt, "code-interpreter-v1")
	_ = sb
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var png string
	var stderr, errs []string
	code := "import matplotlib.pyplot as plt, pandas as pd\n" +
		"df = pd.DataFrame({'x': [1, 2, 3], 'y': [2, 4, 8]})\n" +
		"plt.plot(df.x, df.y)\nplt.show()\nint(df.y.sum())"
	var text string
	if err := c.Execute(ctx, agentclient.ExecuteRequest{Code: code, Language: "python"}, func(ev mcpbox.CodeEvent) {
		switch {
		case ev.Type == mcpbox.EventStderr:
			stderr = append(stderr, ev.Text)
		case ev.Error != nil:
			errs = append(errs, ev.Error.Name+": "+ev.Error.Value)
		case ev.Result != nil && ev.Result.PNG != "":
			png = ev.Result.PNG
		case ev.Result != nil && ev.Result.IsMainResult:
			text = ev.Result.Text
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 || len(stderr) > 0 {
		t.Errorf("errors %q, stderr %q", errs, stderr)
	}
	if b, err := base64.StdEncoding.DecodeString(png); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("no PNG came back (%d base64 bytes, %v)", len(png), err)
	}
	if text != "14" {
		t.Errorf("pandas sum: %q", text)
	}
	if out, _, res := run(t, c, 20*time.Second, "node", "-e", "console.log(6*7)"); out != "42\n" || res.ExitCode != 0 {
		t.Errorf("node: %q", out)
	}
}
