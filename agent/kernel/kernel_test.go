package kernel_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbox/mcpbox/agent/kernel"
)

const path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func serve(t *testing.T, maxOutput int64) string {
	t.Helper()
	return serveWith(t, &kernel.Options{MaxOutputBytes: maxOutput})
}

// serveWith serves a Manager with opts, as the test's user.
func serveWith(t *testing.T, opts *kernel.Options) string {
	t.Helper()
	o := *opts
	o.UID, o.GID, o.Home = os.Getuid(), os.Getgid(), t.TempDir()
	o.Env = map[string]string{"PATH": path, "HOME": t.TempDir(), "LANG": "C.UTF-8"}
	m := kernel.New(&o)
	srv := httptest.NewServer(m.Handler())
	// Kernels first: a cell a failed test left running ends with them.
	t.Cleanup(func() { m.Close(); srv.Close() })
	return srv.URL
}

type event map[string]any

// execute posts body to /execute and returns the events in order.
func execute(t *testing.T, url string, body map[string]any) []event {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/execute", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var e map[string]any
		json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("status %d: %v", resp.StatusCode, e)
	}
	var evs []event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad NDJSON line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 || evs[len(evs)-1]["type"] != "end_of_execution" {
		t.Fatalf("reply does not end with end_of_execution: %v", evs)
	}
	return evs
}

func run(t *testing.T, url, code string) []event {
	t.Helper()
	return execute(t, url, map[string]any{"code": code})
}

// text joins the text of events of one type.
func text(evs []event, typ string) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev["type"] == typ {
			s, _ := ev["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

func find(evs []event, typ string) event {
	for _, ev := range evs {
		if ev["type"] == typ {
			return ev
		}
	}
	return nil
}

func TestPythonState(t *testing.T) {
	url := serve(t, 0)
	run(t, url, "x = 42\nimport math")
	evs := run(t, url, "print(x)\nmath.sqrt(x*x) + 1")
	if got := text(evs, "stdout"); got != "42\n" {
		t.Errorf("stdout %q", got)
	}
	if r := find(evs, "result"); r == nil || r["text"] != "43.0" || r["is_main_result"] != true {
		t.Errorf("last expression result %v", r)
	}
	if n := find(evs, "number_of_executions"); n == nil || n["execution_count"] != float64(2) {
		t.Errorf("execution count %v", n)
	}
	if r := find(run(t, url, "None"), "result"); r != nil {
		t.Errorf("None produced a result: %v", r)
	}
}

func TestPythonOutputOrderAndStreaming(t *testing.T) {
	url := serve(t, 0)
	evs := run(t, url, "import sys, time\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')\ntime.sleep(0.3)\nprint('d')")
	var order []string
	for _, ev := range evs {
		if ev["type"] == "stdout" || ev["type"] == "stderr" {
			order = append(order, strings.TrimSpace(ev["text"].(string)))
		}
	}
	if strings.Join(order, "") != "abcd" {
		t.Errorf("order %v, want a b c d", order)
	}
	// Streaming: the first line arrives as its own event, before the cell
	// finished (d is a separate, later event).
	if len(order) < 4 {
		t.Errorf("output came in %d events, want it streamed line by line", len(order))
	}
	// fd-level output from a subprocess is captured too, before the end.
	evs = run(t, url, "import subprocess\nsubprocess.run(['echo', 'from a child'])\nimport os\nos.write(2, b'raw stderr\\n')")
	if !strings.Contains(text(evs, "stdout"), "from a child") || !strings.Contains(text(evs, "stderr"), "raw stderr") {
		t.Errorf("fd-level output lost: %v", evs)
	}
}

func TestPythonErrors(t *testing.T) {
	url := serve(t, 0)
	evs := run(t, url, "def f():\n    return 1/0\nf()")
	e := find(evs, "error")
	if e == nil || e["name"] != "ZeroDivisionError" || !strings.Contains(e["traceback"].(string), "in f") || strings.Contains(e["traceback"].(string), "_run") {
		t.Errorf("error %v", e)
	}
	e = find(run(t, url, "def broken(:\n  pass"), "error")
	if e == nil || e["name"] != "SyntaxError" {
		t.Errorf("syntax error %v", e)
	}
	// The kernel survives both; after sys.exit the next call gets a fresh
	// one.
	find(run(t, url, "import sys; sys.exit(3)"), "error")
	if got := text(run(t, url, "print('alive')"), "stdout"); got != "alive\n" {
		t.Errorf("after errors: %q", got)
	}
}

func TestPythonHandlerMode(t *testing.T) {
	url := serve(t, 0)
	code := "def handler(event, context):\n    return {'sum': event['a'] + 1, 'rid': len(context.aws_request_id) > 0, 'ms': context.get_remaining_time_in_millis() > 0}"
	evs := execute(t, url, map[string]any{"code": code, "event": map[string]any{"a": 1}})
	rv := find(evs, "return_value")
	want := map[string]any{"sum": float64(2), "rid": true, "ms": true}
	if rv == nil || fmt.Sprint(rv["value"]) != fmt.Sprint(want) {
		t.Errorf("return_value %v, want %v (events %v)", rv, want, evs)
	}
	// In a stateful context the handler sees what earlier cells made.
	run(t, url, "offset = 100")
	evs = execute(t, url, map[string]any{"code": "def handler(event, context):\n    return event + offset", "event": 1})
	if rv := find(evs, "return_value"); rv == nil || rv["value"] != float64(101) {
		t.Errorf("stateful handler: %v", evs)
	}
	evs = execute(t, url, map[string]any{"code": "def handler(e, c):\n    return object()", "event": 1})
	if e := find(evs, "error"); e == nil || !strings.Contains(e["value"].(string), "object") {
		t.Errorf("non-JSON return: %v", evs)
	}
}

func TestPythonTimeoutKeepsState(t *testing.T) {
	url := serve(t, 0)
	run(t, url, "kept = 'yes'")
	evs := execute(t, url, map[string]any{"code": "while True: pass", "timeout": 0.5})
	if e := find(evs, "error"); e == nil || e["name"] != "KeyboardInterrupt" {
		t.Errorf("timeout: %v", evs)
	}
	if got := text(run(t, url, "print(kept)"), "stdout"); got != "yes\n" {
		t.Errorf("state after an interrupted cell: %q", got)
	}
	// A cell that ignores the interrupt gets its kernel restarted.
	evs = execute(t, url, map[string]any{"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)", "timeout": 0.3})
	if e := find(evs, "error"); e == nil || e["name"] != "KernelRestarted" {
		t.Errorf("stubborn cell: %v", evs)
	}
	if e := find(run(t, url, "kept"), "error"); e == nil || e["name"] != "NameError" {
		t.Errorf("state survived a restart it should not have: %v", e)
	}
}

func TestPythonKernelDeath(t *testing.T) {
	url := serve(t, 0)
	run(t, url, "y = 1")
	evs := run(t, url, "import os; os._exit(9)")
	if find(evs, "unexpected_end_of_execution") == nil || find(evs, "error")["name"] != "KernelExited" {
		t.Errorf("death not reported: %v", evs)
	}
	if got := text(run(t, url, "print('fresh', 'y' in globals())"), "stdout"); got != "fresh False\n" {
		t.Errorf("after death: %q", got)
	}
}

func TestPythonTruncationAndBytes(t *testing.T) {
	url := serve(t, 64<<10)
	evs := run(t, url, "import sys\nfor i in range(20000): print('x' * 99)")
	out := text(evs, "stdout")
	if len(out) != 64<<10 || !strings.Contains(text(evs, "stderr"), "bytes dropped") {
		t.Errorf("stdout %d bytes, stderr %q", len(out), text(evs, "stderr"))
	}
	evs = run(t, url, "import os; os.write(1, b'ok\\xff\\xfeend\\n')")
	if got := text(evs, "stdout"); got != "ok\uFFFDend\n" {
		t.Errorf("non-UTF-8 output as %q", got)
	}
}

func TestPythonPlot(t *testing.T) {
	url := serve(t, 0)
	if e := find(run(t, url, "import matplotlib"), "error"); e != nil {
		t.Skip("python3-matplotlib is not installed (make test installs it): ", e["value"])
	}
	evs := run(t, url, "import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 2, 3])")
	var img string
	for _, ev := range evs {
		if s, ok := ev["png"].(string); ok {
			img = s
		}
	}
	raw, err := base64.StdEncoding.DecodeString(img)
	if err != nil || img == "" {
		t.Fatalf("no PNG result: %v", evs)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(raw))
	if err != nil || cfg.Width != 400 || cfg.Height != 300 {
		t.Errorf("PNG %dx%d, %v; want 400x300", cfg.Width, cfg.Height, err)
	}
}

func TestContexts(t *testing.T) {
	url := serve(t, 0)
	post := func(path, body string) *http.Response {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("/execute", `{"code":"1","context_id":"x","language":"python"}`)
	if resp.StatusCode != 400 {
		t.Errorf("context_id and language: %d, want 400", resp.StatusCode)
	}
	resp = post("/contexts", `{"language":"cobol"}`)
	if resp.StatusCode != 400 {
		t.Errorf("unknown language: %d", resp.StatusCode)
	}
	// Eight contexts, each with its own state, running at once.
	ids := make([]string, 8)
	for i := range ids {
		var c struct{ ID, Language, Cwd string }
		json.NewDecoder(post("/contexts", `{"language":"python"}`).Body).Decode(&c)
		if c.ID == "" || c.Language != "python" {
			t.Fatalf("create context: %+v", c)
		}
		ids[i] = c.ID
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			execute(t, url, map[string]any{"context_id": id, "code": fmt.Sprintf("import time; v = %d; time.sleep(0.3)", i)})
			got := text(execute(t, url, map[string]any{"context_id": id, "code": "print(v)"}), "stdout")
			if got != fmt.Sprintf("%d\n", i) {
				t.Errorf("context %d sees v = %q", i, got)
			}
		}()
	}
	wg.Wait()
	var list []map[string]any
	r, _ := http.Get(url + "/contexts")
	json.NewDecoder(r.Body).Decode(&list)
	if len(list) != 8 {
		t.Errorf("%d contexts listed, want 8", len(list))
	}
	if resp := post("/contexts/"+ids[0]+"/restart", ""); resp.StatusCode != 204 {
		t.Errorf("restart: %d", resp.StatusCode)
	}
	if e := find(execute(t, url, map[string]any{"context_id": ids[0], "code": "v"}), "error"); e == nil || e["name"] != "NameError" {
		t.Errorf("state survived restart: %v", e)
	}
	req, _ := http.NewRequest(http.MethodDelete, url+"/contexts/"+ids[0], nil)
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 204 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	if resp := post("/execute", `{"code":"1","context_id":"`+ids[0]+`"}`); resp.StatusCode != 404 {
		t.Errorf("execute in a deleted context: %d, want 404", resp.StatusCode)
	}
}

func TestPythonRichRepr(t *testing.T) {
	url := serve(t, 0)
	evs := run(t, url, `class Rich:
    def _repr_html_(self): return "<b>hi</b>"
    def _repr_markdown_(self): return "**hi**"
    def _repr_json_(self): return {"k": [1, 2]}
    def _repr_latex_(self): return "$x$"
    def _repr_svg_(self): return "<svg/>"
    def _repr_png_(self): return b"\x89PNG"
Rich()`)
	r := find(evs, "result")
	if r == nil {
		t.Fatalf("no result: %v", evs)
	}
	want := map[string]string{"html": "<b>hi</b>", "markdown": "**hi**", "latex": "$x$", "svg": "<svg/>", "png": "iVBORw==", "json": "map[k:[1 2]]"}
	for field, v := range want {
		if got := fmt.Sprint(r[field]); got != v {
			t.Errorf("%s = %q, want %q", field, got, v)
		}
	}
}
