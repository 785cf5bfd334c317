package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// The tests in this file follow a new user's first hour with `mcpbox run`,
// `doctor` and `config show` (issue 12).

func TestRunFirstHour(t *testing.T) {
	testutil.RequireRoot(t)
	home := testutil.Home(t)
	t.Run("javascript handler mode", func(t *testing.T) {
		code, out, errOut := runMain(t, home, "", "run", "-l", "javascript", "--event", `{"a": 1}`,
			"async function handler(event, context) {\n  await null\n  return { b: event.a + 1 }\n}")
		if code != 0 || out != "{\"b\":2}\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, out, _ = runMain(t, home, "", "run", "-l", "javascript", "--event", `1`,
			"function handler() { return 'global' }\nexports.handler = () => 'exported'")
		if code != 0 || out != "\"exported\"\n" {
			t.Errorf("precedence: exit %d, stdout %q", code, out)
		}
	})
	t.Run("one working directory", func(t *testing.T) {
		for _, args := range [][]string{
			{"run", "import os; print(os.getcwd())"},
			{"run", "-l", "javascript", "console.log(process.cwd())"},
			{"run", "-l", "shell", "pwd"},
			{"run", "-l", "javascript", "--event", "{}", "function handler() { return process.cwd() }"},
		} {
			code, out, errOut := runMain(t, home, "", args...)
			if code != 0 || strings.Trim(out, "\"\n") != "/workspace" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	})
	t.Run("a missing module says how to install it", func(t *testing.T) {
		code, _, errOut := runMain(t, home, "", "run", "import nosuchmodule12")
		if code != 1 || !strings.Contains(errOut, "hint: nosuchmodule12 is not installed in the sandbox template (the host's /usr): apt-get install python3-nosuchmodule12") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("a plot is written as a file, without noise", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
			t.Skip("the host's python3 has no matplotlib (apt-get install python3-matplotlib)")
		}
		dir := t.TempDir()
		code, out, errOut := runMain(t, home, "", "run", "--image-dir", dir, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint('drawn')")
		want := filepath.Join(dir, "mcpbox-plot-1.png")
		if code != 0 || out != "drawn\n" || errOut != "mcpbox: image/png written to "+want+"\n" {
			t.Errorf("exit %d, stdout %q, stderr %q; want the image's path and nothing else on stderr", code, out, errOut)
		}
		if b, err := os.ReadFile(want); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
			t.Errorf("%s: %v", want, err)
		}
		// A second run never overwrites the first's image.
		runMain(t, home, "", "run", "--image-dir", dir, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
		if _, err := os.Stat(filepath.Join(dir, "mcpbox-plot-2.png")); err != nil {
			t.Errorf("the second image: %v", err)
		}
	})
}

func TestConfigShowHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MCPBOX_HOME", dir)
	var out strings.Builder
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}
	if code := m.Run(t.Context(), []string{"config", "show"}); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "home: "+dir+"\n") {
		t.Errorf("config show does not print the home in use (%s):\n%s", dir, out.String())
	}
	t.Setenv("MCPBOX_HOME", "")
	out.Reset()
	m.Run(t.Context(), []string{"config", "show"})
	if strings.Contains(out.String(), `home: ""`) || !strings.Contains(out.String(), "home: /") {
		t.Errorf("config show without MCPBOX_HOME:\n%s", out.String())
	}
}

func TestDoctorReportsLibraries(t *testing.T) {
	code, out, errOut := runMain(t, testutil.Home(t), "", "doctor", "--json")
	if code != 0 && code != 1 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res []finding
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	byName := map[string]finding{}
	for _, f := range res {
		byName[f.Check] = f
	}
	py, ok := byName["python libraries"]
	if !ok {
		t.Fatalf("no python libraries check: %v", res)
	}
	// What the doctor says must match what the host's python3 imports.
	for _, lib := range []string{"numpy", "pandas", "matplotlib", "scipy"} {
		has := exec.Command("/usr/bin/python3", "-c", "import "+lib).Run() == nil
		if has && !strings.Contains(strings.SplitN(py.Detail, ";", 2)[0], lib) {
			t.Errorf("python3 imports %s, but the doctor says: %s", lib, py.Detail)
		}
		if !has && (py.Status != statusWarn || !strings.Contains(py.Fix, "python3-"+lib)) {
			t.Errorf("python3 lacks %s, but the doctor says: %+v", lib, py)
		}
	}
	if _, ok := byName["javascript libraries"]; !ok {
		t.Errorf("no javascript libraries check")
	}
}
