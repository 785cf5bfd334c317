package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/internal/testutil/reexec"
)

// TestMain makes the test binary able to act as a sandbox's PID 1, so the
// in-process Main can create sandboxes.
func TestMain(m *testing.M) { reexec.Main(m) }

// runMain runs the CLI in-process and returns its exit code and output.
func runMain(t *testing.T, home, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Home: home}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := m.Run(ctx, args)
	return code, out.String(), errb.String()
}

func TestRunLanguages(t *testing.T) {
	testutil.RequireRoot(t)
	home := testutil.Home(t)
	code := filepath.Join(t.TempDir(), "prog.py")
	os.WriteFile(code, []byte("import sys\nprint('from file', sys.argv)\n"), 0o644)
	tests := []struct {
		name     string
		stdin    string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"python", "", []string{"run", "print(6*7)"}, 0, "42\n", ""},
		{"python exit code", "", []string{"run", "import sys; print('bye'); sys.exit(3)"}, 3, "bye\n", ""},
		{"python stderr", "", []string{"run", "import sys; _ = sys.stderr.write('oops\\n')"}, 0, "", "oops\n"},
		{"python last expression", "", []string{"run", "x = 6\nx * 7"}, 0, "42\n", ""},
		{"python exception", "", []string{"run", "1/0"}, 1, "", "ZeroDivisionError"},
		{"python timeout", "", []string{"run", "--timeout", "1s", "print('started', flush=True)\nwhile True: pass"}, 124, "started\n", "timed out after 1s"},
		{"handler mode", "", []string{"run", "--event", `{"a": 1}`, "def handler(event, context):\n    return {'b': event['a'] + 1}"}, 0, "{\"b\":2}\n", ""},
		{"javascript", "", []string{"run", "-l", "javascript", "console.log([1,2].map(x => x*2).join(','))"}, 0, "2,4\n", ""},
		{"shell", "", []string{"run", "--language", "shell", "echo $((6*7)); exit 5"}, 5, "42\n", ""},
		{"stdin code", "print('via stdin')", []string{"run", "-"}, 0, "via stdin\n", ""},
		{"file", "", []string{"run", "--file", code}, 0, "from file ['-c']\n", ""},
		{"env", "", []string{"run", "-l", "shell", "--env", "GREETING=hi", "echo $GREETING; echo ${HOSTVAR:-unset}"}, 0, "hi\nunset\n", ""},
		{"timeout", "", []string{"run", "--timeout", "1s", "-l", "shell", "echo started; sleep 30"}, 124, "started\n", "timed out after 1s"},
		{"killed by signal", "", []string{"run", "-l", "shell", "kill -9 $$"}, 137, "", ""},
	}
	t.Setenv("HOSTVAR", "leaked")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runMain(t, home, tt.stdin, tt.args...)
			if code != tt.wantCode || out != tt.wantOut || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					code, out, errOut, tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "sessions")); len(ents) != 0 {
		t.Errorf("%d sandboxes left behind by mcpbox run", len(ents))
	}
}

func TestRunBadInput(t *testing.T) {
	home := testutil.Home(t)
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{"unknown language", []string{"run", "-l", "cobol", "x"}, 2, `unknown language "cobol"`},
		{"unknown flavor", []string{"run", "--flavor", "huge", "x"}, 2, `unknown flavor "huge"`},
		{"zero timeout", []string{"run", "--timeout", "0s", "x"}, 2, "timeout must be above 0"},
		{"timeout too long", []string{"run", "--timeout", "2h", "x"}, 2, "above the maximum"},
		{"bad timeout", []string{"run", "--timeout", "soon", "x"}, 2, "invalid argument"},
		{"no code", []string{"run"}, 2, "no code"},
		{"two codes", []string{"run", "a", "b"}, 2, "expected one CODE"},
		{"code and file", []string{"run", "--file", "x.py", "a"}, 2, "not both"},
		{"missing file", []string{"run", "--file", "/nonexistent/x.py"}, 2, "no such file"},
		{"bad env", []string{"run", "--env", "NOEQUALS", "x"}, 2, "expected K=V"},
		{"bad event", []string{"run", "--event", "{nope", "x"}, 2, "not valid JSON"},
		{"event with shell", []string{"run", "-l", "shell", "--event", "1", "x"}, 2, "--event (handler mode) needs --language python or javascript"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runMain(t, home, "", tt.args...)
			if code != tt.want || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.want, tt.wantErr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runMain(t, testutil.Home(t), "", "version")
	if code != 0 || !strings.HasPrefix(out, "mcpbox ") || !strings.Contains(out, "envd protocol 0.6.4") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the real mcpbox binary once, for end-to-end runs.
func binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpbox-bin-")
		if err != nil {
			buildErr = err
			return
		}
		os.Chmod(dir, 0o755)
		binPath = filepath.Join(dir, "mcpbox")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = err
			tb.Logf("%s", out)
		}
	})
	if buildErr != nil {
		tb.Fatalf("build mcpbox: %v", buildErr)
	}
	return binPath
}

// BenchmarkRunPython measures `mcpbox run --language python pass` end to
// end, as a user would run it, beside plain `python3 -c pass`.
func BenchmarkRunPython(b *testing.B) {
	b.Run("baseline=python3-c-pass", func(b *testing.B) {
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				if err := exec.Command("/usr/bin/python3", "-c", "pass").Run(); err != nil {
					b.Fatal(err)
				}
			})
		}
		t.Report(b)
	})
	b.Run("mcpbox-run", func(b *testing.B) {
		testutil.RequireRoot(b)
		bin := binary(b)
		home := testutil.Home(b)
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				cmd := exec.Command(bin, "run", "--language", "python", "pass")
				cmd.Env = append(os.Environ(), "MCPBOX_HOME="+home)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			})
		}
		t.Report(b)
	})
}
