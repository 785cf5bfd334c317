package kernel_test

import (
	"fmt"
	"strings"
	"testing"
)

func js(t *testing.T, url, code string) []event {
	t.Helper()
	return execute(t, url, map[string]any{"code": code, "language": "js"})
}

func TestJavaScriptState(t *testing.T) {
	url := serve(t, 0)
	js(t, url, "let a = 40\nconst b = 2\nfunction add(x, y) { return x + y }\nclass Box { constructor(v) { this.v = v } }")
	evs := js(t, url, "console.log('sum', add(a, b))\nnew Box(a + b).v")
	if got := text(evs, "stdout"); got != "sum 42\n" {
		t.Errorf("stdout %q", got)
	}
	if r := find(evs, "result"); r == nil || r["text"] != "42" {
		t.Errorf("last expression: %v", r)
	}
	// Running the declaring cell again works, as in a notebook.
	if e := find(js(t, url, "let a = 1\nconst b = 1\nclass Box {}"), "error"); e != nil {
		t.Errorf("re-running declarations: %v", e)
	}
	if got := find(js(t, url, "require('path').basename('/x/y.txt')"), "result"); got == nil || got["text"] != "'y.txt'" {
		t.Errorf("require of a built-in: %v", got)
	}
}

func TestJavaScriptAwaitAndErrors(t *testing.T) {
	url := serve(t, 0)
	evs := js(t, url, "const v = await new Promise(r => setTimeout(() => r(21), 50))\nconsole.error('waited')\nv * 2")
	if r := find(evs, "result"); r == nil || r["text"] != "42" || text(evs, "stderr") != "waited\n" {
		t.Errorf("top-level await: %v", evs)
	}
	if r := find(js(t, url, "v + 1"), "result"); r == nil || r["text"] != "22" {
		t.Errorf("a declaration in an await cell did not survive: %v", r)
	}
	e := find(js(t, url, "function boom() { throw new RangeError('too far') }\nboom()"), "error")
	if e == nil || e["name"] != "RangeError" || e["value"] != "too far" || !strings.Contains(e["traceback"].(string), "boom") {
		t.Errorf("thrown error: %v", e)
	}
	if e := find(js(t, url, "let = ;"), "error"); e == nil || e["name"] != "SyntaxError" {
		t.Errorf("syntax error: %v", e)
	}
}

func TestJavaScriptHandlerMode(t *testing.T) {
	url := serve(t, 0)
	for name, code := range map[string]string{
		"handler":                "function handler(event, context) { return { n: event.n + 1, id: context.awsRequestId.length > 0 } }",
		"exports.handler async":  "exports.handler = async (event, ctx) => { await new Promise(r => setTimeout(r, 10)); return { n: event.n + 1, id: ctx.getRemainingTimeInMillis() > 0 } }",
		"module.exports.handler": "module.exports.handler = (event) => ({ n: event.n + 1, id: true })",
	} {
		t.Run(name, func(t *testing.T) {
			url := serve(t, 0) // a fresh context per style
			evs := execute(t, url, map[string]any{"code": code, "language": "javascript", "event": map[string]any{"n": 1}})
			rv := find(evs, "return_value")
			if rv == nil || fmt.Sprint(rv["value"]) != "map[id:true n:2]" {
				t.Errorf("return_value %v (events %v)", rv, evs)
			}
		})
	}
	evs := execute(t, url, map[string]any{"code": "function handler() { return 10n }", "language": "javascript", "event": 0})
	if e := find(evs, "error"); e == nil || !strings.Contains(e["value"].(string), "BigInt") {
		t.Errorf("non-JSON return: %v", evs)
	}
}

func TestJavaScriptTimeoutKeepsState(t *testing.T) {
	url := serve(t, 0)
	js(t, url, "var kept = 'yes'")
	evs := execute(t, url, map[string]any{"code": "while (true) {}", "language": "javascript", "timeout": 0.5})
	if e := find(evs, "error"); e == nil {
		t.Errorf("timeout: %v", evs)
	}
	if got := text(js(t, url, "console.log(kept)"), "stdout"); got != "yes\n" {
		t.Errorf("state after an interrupted loop: %q", got)
	}
}

// TestJavaScriptHandlerPrecedence pins which handler an event reaches:
// the one the call's own code defines, exported before global; with none
// defined by the call, an exported handler before a global one.
func TestJavaScriptHandlerPrecedence(t *testing.T) {
	call := func(t *testing.T, url, code string) string {
		t.Helper()
		evs := execute(t, url, map[string]any{"code": code, "language": "javascript", "event": map[string]any{}})
		rv := find(evs, "return_value")
		if rv == nil {
			t.Fatalf("no return_value: %v", evs)
		}
		return fmt.Sprint(rv["value"])
	}
	t.Run("async function with await", func(t *testing.T) {
		url := serve(t, 0)
		got := call(t, url, "async function handler(event, context) {\n  await new Promise(r => setTimeout(r, 5))\n  return 'async ' + typeof context.getRemainingTimeInMillis\n}")
		if got != "async function" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("async function with await on one line", func(t *testing.T) {
		url := serve(t, 0)
		if got := call(t, url, "async function handler(e) { await null; return 'one line' }"); got != "one line" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("newer export beats an earlier global", func(t *testing.T) {
		url := serve(t, 0)
		js(t, url, "function handler() { return 'old global' }")
		if got := call(t, url, "exports.handler = async () => 'new export'"); got != "new export" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("newer global beats an earlier export", func(t *testing.T) {
		url := serve(t, 0)
		js(t, url, "module.exports.handler = () => 'old export'")
		if got := call(t, url, "function handler() { return 'new global' }"); got != "new global" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("nothing new: export before global", func(t *testing.T) {
		url := serve(t, 0)
		js(t, url, "function handler() { return 'global' }\nexports.handler = () => 'export'")
		if got := call(t, url, "1"); got != "export" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("no handler says what to define", func(t *testing.T) {
		url := serve(t, 0)
		evs := execute(t, url, map[string]any{"code": "const x = 1", "language": "javascript", "event": 1})
		if e := find(evs, "error"); e == nil || !strings.Contains(fmt.Sprint(e["value"]), "exports.handler") {
			t.Errorf("error %v", evs)
		}
	})
}

// TestHandlerContextCountsDownFromTheTimeout: the time a handler's
// context says remains is the call's own timeout, not a fixed 30 s.
func TestHandlerContextCountsDownFromTheTimeout(t *testing.T) {
	url := serve(t, 0)
	for lang, code := range map[string]string{
		"python":     "def handler(event, context):\n    return context.get_remaining_time_in_millis()",
		"javascript": "function handler(event, context) { return context.getRemainingTimeInMillis() }",
	} {
		evs := execute(t, url, map[string]any{"code": code, "language": lang, "event": 0, "timeout": 5})
		rv := find(evs, "return_value")
		if rv == nil {
			t.Fatalf("%s: no return_value: %v", lang, evs)
		}
		if ms, _ := rv["value"].(float64); ms <= 3000 || ms > 5000 {
			t.Errorf("%s: %v ms remain of a 5 s timeout", lang, rv["value"])
		}
	}
}
