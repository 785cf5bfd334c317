package mcpserver_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
)

// The tests in this file follow a new user's first hour (issue 12): each
// asserts what a model or a person reads in a tool's result.

// TestArgumentErrorsInWords checks that a bad argument is named, with what
// it may be, in words: never the schema validator's "[python javascript
// shell]" or "0/1 is less than 1.000000".
func TestArgumentErrorsInWords(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	tests := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"unknown language", "execute_code", map[string]any{"code": "1", "language": "cobol"},
			`language must be one of python, javascript or shell, not "cobol"`},
		{"timeout zero", "execute_code", map[string]any{"code": "1", "timeout": 0},
			"timeout must be from 1 to 3600 seconds, not 0"},
		{"timeout too long", "execute_command", map[string]any{"command": "ls", "timeout": 7200},
			"timeout must be from 1 to 3600 seconds, not 7200"},
		{"missing code", "execute_code", map[string]any{}, "code is required"},
		{"wrong type", "execute_code", map[string]any{"code": 42}, "code must be a string, not the number 42"},
		{"invented argument", "execute_code", map[string]any{"code": "1", "verbose": true},
			`execute_code has no argument "verbose"; it takes code, language,`},
		{"env not strings", "execute_code", map[string]any{"code": "1", "env": map[string]any{"N": 1}}, "env.N must be a string"},
		{"bad mode", "write_file", map[string]any{"session_id": "x", "path": "a", "content": "", "mode": "rwx"}, `mode "rwx" does not have the expected form`},
		{"depth", "list_files", map[string]any{"session_id": "x", "depth": 0}, "depth must be from 1 to 10 levels, not 0"},
		{"event with shell", "execute_code", map[string]any{"code": "echo", "language": "shell", "event": map[string]any{}},
			"event (handler mode) works with language python or javascript, not shell"},
		{"ttl not a duration", "create_session", map[string]any{"ttl": "soon"}, `ttl: "soon" is not a length of time: give seconds (7200) or a duration such as 2h`},
		{"ttl negative", "create_session", map[string]any{"ttl": -5}, "ttl: -5 seconds is not a length of time"},
		{"ttl wrong type", "create_session", map[string]any{"ttl": true}, "ttl must be a number or a string, not true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fails(t, cs, tt.tool, tt.args, mcpbox.EINVALID)
			msg := fmt.Sprint(r.S["message"])
			if !strings.Contains(msg, tt.want) || !strings.Contains(r.text(), tt.want) {
				t.Errorf("message %q, text %q; want %q", msg, r.text(), tt.want)
			}
			for _, bad := range []string{"is less than", "[python", "validating", "not in enum"} {
				if strings.Contains(msg, bad) {
					t.Errorf("message %q speaks the validator's language (%q)", msg, bad)
				}
			}
			if r.S["category"] != "input" || len(r.S["recovery_suggestions"].([]any)) == 0 {
				t.Errorf("error shape: %v", r.S)
			}
		})
	}
}

// TestTTLSecondsOrDuration checks that ttl takes seconds and Go durations
// alike, and that the result says both deadlines and why the idle one
// comes first.
func TestTTLSecondsOrDuration(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm, DefaultIdleTimeout: 15 * time.Minute})
	cs := e.connect(t, "alice", nil)
	for _, ttl := range []any{7200, "7200", "2h", "120m"} {
		t.Run(fmt.Sprint(ttl), func(t *testing.T) {
			r := ok(t, cs, "create_session", map[string]any{"ttl": ttl})
			created, _ := time.Parse(time.RFC3339, r.S["created"].(string))
			ends, err := time.Parse(time.RFC3339, fmt.Sprint(r.S["ends_at"]))
			if err != nil || ends.Sub(created).Round(time.Minute) != 2*time.Hour {
				t.Errorf("ends_at %v, created %v: want 2h apart", r.S["ends_at"], r.S["created"])
			}
			if r.S["idle_timeout_seconds"] != float64(900) {
				t.Errorf("idle_timeout_seconds = %v", r.S["idle_timeout_seconds"])
			}
			text := r.text()
			if !strings.Contains(text, fmt.Sprint(r.S["ends_at"])+" at the latest (its ttl)") || !strings.Contains(text, "after 15m0s without a call (the server's idle timeout") {
				t.Errorf("text does not give both deadlines and why: %q", text)
			}
			list := ok(t, cs, "get_sessions", map[string]any{"session_id": r.S["session_id"]})
			if !strings.Contains(list.text(), "ends by "+fmt.Sprint(r.S["ends_at"])) || !strings.Contains(list.text(), "expires if unused") {
				t.Errorf("get_sessions text: %q", list.text())
			}
			ok(t, cs, "stop_session", map[string]any{"session_id": r.S["session_id"]})
		})
	}
}

// TestUnknownHandleSuggestsTheRightTool: a handle that is not one points
// at execute_command's background mode, not at list_files.
func TestUnknownHandleSuggestsTheRightTool(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	id := ok(t, cs, "create_session", nil).S["session_id"]
	for _, tool := range []string{"get_command_output", "stop_command"} {
		r := fails(t, cs, tool, map[string]any{"session_id": id, "handle": "nope"}, mcpbox.ENOTFOUND)
		if s := fmt.Sprint(r.S["recovery_suggestions"]); !strings.Contains(s, "execute_command") || strings.Contains(s, "list_files") {
			t.Errorf("%s: suggestions %s", tool, s)
		}
	}
}

// TestFirstHourInASandbox runs what a new user tries first in one real
// session: files and code agree on the working directory, kernels that
// exit say so at once, JavaScript handler mode, plots without noise, and
// a truncation note that names the limit applied.
func TestFirstHourInASandbox(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{})
	cs := e.connect(t, "alice", nil)
	id := ok(t, cs, "create_session", nil).S["session_id"].(string)
	testutil.Track(id)

	t.Run("one working directory", func(t *testing.T) {
		ok(t, cs, "write_file", map[string]any{"session_id": id, "path": "hello.txt", "content": "hi"})
		for lang, code := range map[string]string{
			"python":     "import os\nprint(os.getcwd(), open('hello.txt').read())",
			"javascript": "console.log(process.cwd(), require('fs').readFileSync('hello.txt', 'utf8'))",
			"shell":      "echo $(pwd) $(cat hello.txt)",
		} {
			r := ok(t, cs, "execute_code", map[string]any{"session_id": id, "language": lang, "code": code})
			if r.S["stdout"] != "/workspace hi\n" {
				t.Errorf("%s: %v", lang, r.S["stdout"])
			}
		}
		if r := ok(t, cs, "execute_command", map[string]any{"session_id": id, "command": "echo $(pwd) $(cat hello.txt)"}); r.S["stdout"] != "/workspace hi\n" {
			t.Errorf("execute_command: %v", r.S["stdout"])
		}
		ok(t, cs, "execute_code", map[string]any{"session_id": id, "code": "open('from_code.txt', 'w').write('x')"})
		if r := ok(t, cs, "read_file", map[string]any{"session_id": id, "path": "from_code.txt"}); r.S["content"] != "x" {
			t.Errorf("read_file of a relative path code wrote: %v", r.S)
		}
	})

	t.Run("kernel exits are reported at once", func(t *testing.T) {
		for _, tc := range []struct{ lang, code, stdout, status string }{
			{"javascript", "console.log('before'); process.exit(2)", "before\n", "status 2"},
			{"shell", "echo before; exit 3", "before\n", "3"},
			{"python", "print('before')\nimport sys\nsys.exit(7)", "before\n", "status 7"},
		} {
			start := time.Now()
			r := fails(t, cs, "execute_code", map[string]any{"session_id": id, "language": tc.lang, "code": tc.code, "timeout": 20}, mcpbox.ECODE)
			msg := fmt.Sprint(r.S["message"])
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s: the exit took %s to be reported", tc.lang, d)
			}
			if r.S["stdout"] != tc.stdout || !strings.Contains(msg, tc.status) {
				t.Errorf("%s: stdout %q, message %q", tc.lang, r.S["stdout"], msg)
			}
			if strings.Contains(msg, "kept") && strings.Contains(msg, "lost") {
				t.Errorf("%s: says both kept and lost: %q", tc.lang, msg)
			}
			if strings.Contains(fmt.Sprint(r.S["error"]), "Traceback") {
				t.Errorf("%s: an exit printed a traceback: %v", tc.lang, r.S["error"])
			}
			// The next call gets a working kernel.
			next := ok(t, cs, "execute_code", map[string]any{"session_id": id, "language": tc.lang, "code": map[string]string{
				"javascript": "console.log('again')", "shell": "echo again", "python": "print('again')"}[tc.lang]})
			if next.S["stdout"] != "again\n" {
				t.Errorf("%s after an exit: %v", tc.lang, next.S)
			}
		}
	})

	t.Run("javascript handler mode", func(t *testing.T) {
		r := ok(t, cs, "execute_code", map[string]any{"session_id": id, "language": "javascript", "event": map[string]any{"n": 41},
			"code": "async function handler(event, context) {\n  await null\n  return { n: event.n + 1 }\n}"})
		if rv, _ := r.S["return_value"].(map[string]any); rv["n"] != float64(42) {
			t.Errorf("return_value %v", r.S["return_value"])
		}
	})

	t.Run("a plot prints no noise", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
			t.Skip("the host's python3 has no matplotlib (apt-get install python3-matplotlib)")
		}
		r := ok(t, cs, "execute_code", map[string]any{"session_id": id, "code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
		if r.S["stderr"] != "" {
			t.Errorf("a plot wrote to stderr: %q", r.S["stderr"])
		}
		if !strings.Contains(r.text(), "[image/png attached]") {
			t.Errorf("text %q does not mention the image", r.text())
		}
	})

	t.Run("a missing module says where to install it", func(t *testing.T) {
		r := fails(t, cs, "execute_code", map[string]any{"session_id": id, "code": "import nosuchmodule12.sub"}, mcpbox.ECODE)
		sug := fmt.Sprint(r.S["recovery_suggestions"])
		if r.S["context"].(map[string]any)["module"] != "nosuchmodule12" || !strings.Contains(sug, "apt-get install python3-nosuchmodule12") ||
			!strings.Contains(sug, "pip install --user nosuchmodule12") {
			t.Errorf("context %v, suggestions %s", r.S["context"], sug)
		}
	})

	t.Run("background output shows its newest part", func(t *testing.T) {
		bg := ok(t, cs, "execute_command", map[string]any{"session_id": id, "background": true,
			"command": "python3 -c \"print('x' * 300000)\"; echo END"})
		var out result
		for range 100 {
			if out = ok(t, cs, "get_command_output", map[string]any{"session_id": id, "handle": bg.S["handle"]}); out.S["done"] == true {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		stdout, _ := out.S["stdout"].(string)
		if out.S["truncated"] != true || len(stdout) != 100<<10 || !strings.HasSuffix(stdout, "x\nEND\n") {
			t.Errorf("truncated %v, %d bytes ending %q", out.S["truncated"], len(stdout), stdout[max(0, len(stdout)-10):])
		}
		if !strings.Contains(out.text(), "shows the last 100 KiB of stdout") {
			t.Errorf("note: %q", out.text()[max(0, len(out.text())-200):])
		}
	})

	t.Run("truncation names the limit applied", func(t *testing.T) {
		r := ok(t, cs, "execute_code", map[string]any{"session_id": id, "code": "print('x' * 300000)"})
		if r.S["truncated"] != true || len(r.S["stdout"].(string)) != 100<<10 {
			t.Fatalf("truncated %v, %d bytes of stdout", r.S["truncated"], len(r.S["stdout"].(string)))
		}
		if omitted := r.S["omitted_bytes"].(float64); omitted != 300001-100<<10 {
			t.Errorf("omitted_bytes = %v, want %d", omitted, 300001-100<<10)
		}
		if !strings.Contains(r.text(), "shows the first 100 KiB of stdout") || strings.Contains(r.text(), "1 MiB") {
			t.Errorf("truncation note: %q", r.text()[len(r.text())-300:])
		}
	})
}
