package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/internal/testutil/reexec"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

func TestMain(m *testing.M) { reexec.Main(m) }

// env is a manager on the real local runtime with an MCP server over it.
type env struct {
	m   *manager.Manager
	srv *mcpserver.Server
}

func newEnv(t *testing.T, opts mcpserver.Options, mopts manager.Options) *env {
	t.Helper()
	if mopts.Runtime == nil {
		testutil.RequireRoot(t)
		rt, err := local.New(&local.Options{Home: testutil.Home(t)})
		if err != nil {
			t.Fatal(err)
		}
		mopts.Runtime = rt
	}
	mopts.Store = memstore.New()
	m, err := manager.New(context.Background(), &mopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.StopAll(context.Background()) })
	opts.Manager = m
	srv, err := mcpserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{m: m, srv: srv}
}

// connect returns a client session talking to owner's server in-process.
func (e *env) connect(t *testing.T, owner string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := e.srv.For(owner).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// result is a tool result with its structured content decoded.
type result struct {
	*mcp.CallToolResult
	S map[string]any
}

func (r result) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) result {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	r := result{CallToolResult: res}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &r.S)
	return r
}

// ok calls a tool that must succeed.
func ok(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) result {
	t.Helper()
	r := call(t, cs, tool, args)
	if r.IsError {
		t.Fatalf("%s(%v) failed: %s", tool, args, r.text())
	}
	return r
}

// fails calls a tool that must fail with code, and checks the error shape.
func fails(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, code string) result {
	t.Helper()
	r := call(t, cs, tool, args)
	if !r.IsError {
		t.Fatalf("%s(%v) succeeded, want %s: %s", tool, args, code, r.text())
	}
	if r.S["error_code"] != code {
		t.Fatalf("%s(%v): error_code %v, want %s: %s", tool, args, r.S["error_code"], code, r.text())
	}
	for _, k := range []string{"category", "severity", "message"} {
		if s, _ := r.S[k].(string); s == "" {
			t.Errorf("%s: error has no %s: %v", tool, k, r.S)
		}
	}
	if sug, _ := r.S["recovery_suggestions"].([]any); len(sug) == 0 {
		t.Errorf("%s: error has no recovery_suggestions: %v", tool, r.S)
	}
	if _, isMap := r.S["context"].(map[string]any); !isMap {
		t.Errorf("%s: error has no context object: %v", tool, r.S)
	}
	if !strings.Contains(r.text(), code) {
		t.Errorf("%s: text %q does not name %s", tool, r.text(), code)
	}
	return r
}

func TestToolsList(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.OutputSchema == nil || len(tool.Description) < 60 {
			t.Errorf("%s: no output schema or a thin description", tool.Name)
		}
	}
	want := []string{"create_session", "execute_code", "execute_command", "get_command_output", "get_sessions",
		"get_volume_path", "list_files", "read_file", "stop_command", "stop_session", "write_file"}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
}

func noWarm(context.Context, http.RoundTripper) error { return nil }

func TestProtocolErrors(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	ctx := context.Background()
	for name, params := range map[string]*mcp.CallToolParams{
		"unknown tool":  {Name: "rm_rf", Arguments: map[string]any{}},
		"not an object": {Name: "execute_code", Arguments: []int{1, 2}},
	} {
		_, err := cs.CallTool(ctx, params)
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s: err = %v, want JSON-RPC -32602", name, err)
			continue
		}
		var data map[string]any
		if json.Unmarshal(je.Data, &data) != nil || data["error_code"] != mcpbox.EINVALID || data["category"] == nil {
			t.Errorf("%s: data = %s, want the ToolError shape with INVALID_ARGUMENT", name, je.Data)
		}
	}
}

func TestBadArguments(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	for name, args := range map[string]map[string]any{
		"missing code":     {},
		"unknown language": {"code": "1", "language": "cobol"},
		"timeout zero":     {"code": "1", "timeout": 0.5},
		"timeout too long": {"code": "1", "timeout": 7200},
		"wrong type":       {"code": 42},
		"invented arg":     {"code": "1", "verbose": true},
		"unknown flavor":   {"code": "1", "flavor": "huge"},
		"unknown template": {"code": "1", "template": "gpu"},
	} {
		t.Run(name, func(t *testing.T) {
			r := fails(t, cs, "execute_code", args, mcpbox.EINVALID)
			if r.S["category"] != "input" {
				t.Errorf("category = %v", r.S["category"])
			}
		})
	}
	fails(t, cs, "write_file", map[string]any{"session_id": "x", "path": "a", "content": "!!", "encoding": "base64"}, mcpbox.EINVALID)
}

func TestSessionErrors(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm, MaxSessionsPerOwner: 2})
	alice, bob := e.connect(t, "alice", nil), e.connect(t, "bob", nil)
	s := ok(t, alice, "create_session", nil)
	id := s.S["session_id"].(string)

	// Bob cannot see, use or stop Alice's session: to him it does not exist.
	for tool, args := range map[string]map[string]any{
		"execute_code":    {"code": "1", "session_id": id},
		"execute_command": {"command": "true", "session_id": id},
		"read_file":       {"session_id": id, "path": "a"},
		"stop_session":    {"session_id": id},
		"get_sessions":    {"session_id": id},
		"get_volume_path": {"session_id": id},
	} {
		r := fails(t, bob, tool, args, mcpbox.ESESSION)
		if strings.Contains(r.text(), "alice") || strings.Contains(r.text(), "forbidden") {
			t.Errorf("%s leaks the owner: %s", tool, r.text())
		}
	}
	if list := ok(t, bob, "get_sessions", nil); len(list.S["sessions"].([]any)) != 0 {
		t.Errorf("bob sees sessions: %v", list.S)
	}
	fails(t, alice, "execute_code", map[string]any{"code": "1", "session_id": "nonexistent"}, mcpbox.ESESSION)

	ok(t, alice, "create_session", nil)
	r := fails(t, alice, "create_session", nil, mcpbox.ELIMIT)
	if r.S["context"].(map[string]any)["limit"] == nil {
		t.Errorf("limit error without the numbers: %v", r.S)
	}
	fails(t, alice, "create_session", map[string]any{"ttl": 1e9}, mcpbox.ELIMIT)

	ok(t, alice, "stop_session", map[string]any{"session_id": id})
	ok(t, alice, "stop_session", map[string]any{"session_id": id}) // idempotent
	fails(t, alice, "execute_command", map[string]any{"command": "true", "session_id": id}, mcpbox.ESESSION)
}

func TestRequireSessionID(t *testing.T) {
	e := newEnv(t, mcpserver.Options{RequireSessionID: true}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	fails(t, cs, "execute_code", map[string]any{"code": "1"}, mcpbox.EINVALID)
	fails(t, cs, "execute_command", map[string]any{"command": "ls"}, mcpbox.EINVALID)
}

func TestExecuteCode(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{})
	cs := e.connect(t, "alice", nil)

	first := ok(t, cs, "execute_code", map[string]any{"code": "x = 42"})
	id, _ := first.S["session_id"].(string)
	if id == "" || first.S["session_created"] != true {
		t.Fatalf("first call: %v", first.S)
	}
	testutil.Track(id)
	second := ok(t, cs, "execute_code", map[string]any{"code": "print(x)\nx + 1", "session_id": id})
	if second.S["stdout"] != "42\n" || second.S["session_created"] != false {
		t.Errorf("second call: %v", second.S)
	}
	if res := second.S["results"].([]any); len(res) != 1 || res[0].(map[string]any)["text"] != "43" {
		t.Errorf("results = %v", second.S["results"])
	}
	if !strings.Contains(second.text(), "42") || !strings.Contains(second.text(), id) {
		t.Errorf("text = %q", second.text())
	}

	t.Run("raise", func(t *testing.T) {
		r := fails(t, cs, "execute_code", map[string]any{"code": "print('before')\n1/0", "session_id": id}, mcpbox.ECODE)
		errObj, _ := r.S["error"].(map[string]any)
		if errObj["name"] != "ZeroDivisionError" || !strings.Contains(errObj["traceback"].(string), "1/0") || r.S["stdout"] != "before\n" {
			t.Errorf("structured = %v", r.S)
		}
		if r.S["severity"] != "warning" || !strings.Contains(r.text(), "ZeroDivisionError") {
			t.Errorf("severity %v, text %q", r.S["severity"], r.text())
		}
	})
	t.Run("kernel exit is said once, with its status", func(t *testing.T) {
		r := fails(t, cs, "execute_code", map[string]any{"code": "print('bye')\nimport sys\nsys.exit(7)", "session_id": id}, mcpbox.ECODE)
		msg := fmt.Sprint(r.S["message"])
		if r.S["stdout"] != "bye\n" || !strings.Contains(msg, "exited with status 7") || strings.Contains(msg, "kept") {
			t.Errorf("a kernel that exited: %v", r.S)
		}
		after := ok(t, cs, "execute_code", map[string]any{"code": "x = 42\nx", "session_id": id})
		if after.S["results"].([]any)[0].(map[string]any)["text"] != "42" {
			t.Errorf("the next call after an exit: %v", after.S)
		}
	})
	t.Run("timeout keeps state", func(t *testing.T) {
		r := fails(t, cs, "execute_code", map[string]any{"code": "import time\ntime.sleep(30)", "session_id": id, "timeout": 1}, mcpbox.ETIMEOUT)
		if r.S["session_id"] != id {
			t.Errorf("timeout result lost the session: %v", r.S)
		}
		if after := ok(t, cs, "execute_code", map[string]any{"code": "x", "session_id": id}); after.S["results"].([]any)[0].(map[string]any)["text"] != "42" {
			t.Errorf("state after timeout: %v", after.S)
		}
	})
	t.Run("javascript and shell", func(t *testing.T) {
		ok(t, cs, "execute_code", map[string]any{"code": "const greet = n => `hi ${n}`", "language": "javascript", "session_id": id})
		js := ok(t, cs, "execute_code", map[string]any{"code": "console.log(greet('js'))", "language": "javascript", "session_id": id})
		if js.S["stdout"] != "hi js\n" {
			t.Errorf("js: %v", js.S)
		}
		sh := ok(t, cs, "execute_code", map[string]any{"code": "cd /tmp && export K=v", "language": "shell", "session_id": id})
		sh = ok(t, cs, "execute_code", map[string]any{"code": "echo $PWD $K", "language": "shell", "session_id": id})
		if sh.S["stdout"] != "/tmp v\n" {
			t.Errorf("shell: %v", sh.S)
		}
		fails(t, cs, "execute_code", map[string]any{"code": "false", "language": "shell", "session_id": id}, mcpbox.ECODE)
		list := ok(t, cs, "get_sessions", map[string]any{"session_id": id})
		langs := list.S["sessions"].([]any)[0].(map[string]any)["languages"]
		if !slices.Equal(toStrings(langs), []string{"javascript", "python", "shell"}) {
			t.Errorf("languages = %v", langs)
		}
	})
	t.Run("handler mode", func(t *testing.T) {
		r := ok(t, cs, "execute_code", map[string]any{"code": "def handler(event, context):\n    return {'sum': event['a'] + event['b']}", "event": map[string]any{"a": 2, "b": 3}})
		testutil.Track(r.S["session_id"].(string))
		if rv, _ := r.S["return_value"].(map[string]any); rv["sum"] != float64(5) {
			t.Errorf("return_value = %v", r.S["return_value"])
		}
	})
	t.Run("env", func(t *testing.T) {
		r := ok(t, cs, "execute_code", map[string]any{"code": "import os; print(os.environ['TOKEN'])", "session_id": id, "env": map[string]any{"TOKEN": "abc"}})
		if r.S["stdout"] != "abc\n" {
			t.Errorf("env: %v", r.S)
		}
	})
	t.Run("plot is image content", func(t *testing.T) {
		r := ok(t, cs, "execute_code", map[string]any{"session_id": id, "code": "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
		var img *mcp.ImageContent
		for _, c := range r.Content {
			if i, ok := c.(*mcp.ImageContent); ok {
				img = i
			}
		}
		if img == nil || img.MIMEType != "image/png" {
			t.Fatalf("no PNG image content: %v", r.Content)
		}
		if _, err := png.Decode(bytes.NewReader(img.Data)); err != nil {
			t.Errorf("image does not decode: %v", err)
		}
	})
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestProgressAndCancel(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{})
	var mu sync.Mutex
	var msgs []string
	cs := e.connect(t, "alice", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		msgs = append(msgs, r.Params.Message)
		mu.Unlock()
	}})
	s := ok(t, cs, "execute_code", map[string]any{"code": "x = 7"})
	id := s.S["session_id"].(string)
	testutil.Track(id)

	params := &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": id,
		"code": "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)"}}
	params.SetProgressToken("p1")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	// The client hands over a response as it reads it; notifications read
	// before it may still be in its handler queue.
	joined := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(msgs, "|")
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !strings.Contains(joined(), "tick 2"); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := joined(); !strings.Contains(got, "tick 0") || !strings.Contains(got, "tick 2") {
		t.Errorf("progress messages = %q", got)
	}

	// Cancelling the call interrupts the loop inside the sandbox.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": id, "code": "while True:\n    pass", "timeout": 600}})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-done; err == nil {
		t.Error("cancelled call returned no error")
	}
	// The session still answers, with its state, once the kernel is free.
	var r result
	for range 50 {
		r = call(t, cs, "execute_code", map[string]any{"code": "x * 6", "session_id": id})
		if !r.IsError || r.S["error_code"] != mcpbox.ELIMIT {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.IsError || r.S["results"].([]any)[0].(map[string]any)["text"] != "42" {
		t.Errorf("after cancel: %s", r.text())
	}
}

func TestCommandsAndFiles(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{})
	cs := e.connect(t, "alice", nil)
	r := ok(t, cs, "execute_command", map[string]any{"command": "echo hello world | tr a-z A-Z && echo note >&2"})
	id := r.S["session_id"].(string)
	testutil.Track(id)
	if r.S["stdout"] != "HELLO WORLD\n" || r.S["stderr"] != "note\n" || r.S["exit_code"] != float64(0) {
		t.Errorf("command: %v", r.S)
	}
	f := fails(t, cs, "execute_command", map[string]any{"command": "echo partial; exit 3", "session_id": id}, mcpbox.ECOMMAND)
	if f.S["stdout"] != "partial\n" || f.S["exit_code"] != float64(3) {
		t.Errorf("failed command: %v", f.S)
	}
	fails(t, cs, "execute_command", map[string]any{"command": "sleep 10", "session_id": id, "timeout": 1}, mcpbox.ETIMEOUT)

	bg := ok(t, cs, "execute_command", map[string]any{"command": "echo started; sleep 60", "session_id": id, "background": true})
	h := bg.S["handle"].(string)
	var out result
	for range 50 {
		out = ok(t, cs, "get_command_output", map[string]any{"session_id": id, "handle": h})
		if out.S["stdout"] == "started\n" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out.S["stdout"] != "started\n" || out.S["done"] != false {
		t.Errorf("background output: %v", out.S)
	}
	ok(t, cs, "stop_command", map[string]any{"session_id": id, "handle": h})
	for range 50 {
		if out = ok(t, cs, "get_command_output", map[string]any{"session_id": id, "handle": h}); out.S["done"] == true {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out.S["done"] != true {
		t.Errorf("stopped command still running: %v", out.S)
	}
	fails(t, cs, "get_command_output", map[string]any{"session_id": id, "handle": "nope"}, mcpbox.ENOTFOUND)

	ok(t, cs, "write_file", map[string]any{"session_id": id, "path": "dir/hello.sh", "content": "#!/bin/sh\necho from script\n", "mode": "0755"})
	if run := ok(t, cs, "execute_command", map[string]any{"session_id": id, "command": "./dir/hello.sh"}); run.S["stdout"] != "from script\n" {
		t.Errorf("script: %v", run.S)
	}
	if rd := ok(t, cs, "read_file", map[string]any{"session_id": id, "path": "/workspace/dir/hello.sh"}); rd.S["content"] != "#!/bin/sh\necho from script\n" {
		t.Errorf("read: %v", rd.S)
	}
	bin := []byte{0, 1, 2, 0xff, 0xfe}
	ok(t, cs, "write_file", map[string]any{"session_id": id, "path": "b.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"})
	if rd := ok(t, cs, "read_file", map[string]any{"session_id": id, "path": "b.bin", "encoding": "base64"}); rd.S["content"] != base64.StdEncoding.EncodeToString(bin) {
		t.Errorf("binary read: %v", rd.S)
	}
	fails(t, cs, "read_file", map[string]any{"session_id": id, "path": "b.bin"}, mcpbox.EINVALID)
	fails(t, cs, "read_file", map[string]any{"session_id": id, "path": "missing.txt"}, mcpbox.ENOTFOUND)
	if r := fails(t, cs, "read_file", map[string]any{"session_id": id, "path": "/etc/../../proc/1/root/etc/shadow"}, mcpbox.EINVALID); strings.Contains(r.text(), `"code"`) {
		t.Errorf("agent's JSON leaks into the message: %s", r.text())
	}
	ls := ok(t, cs, "list_files", map[string]any{"session_id": id, "depth": 2})
	var paths []string
	for _, e := range ls.S["entries"].([]any) {
		paths = append(paths, e.(map[string]any)["path"].(string))
	}
	if !slices.Contains(paths, "/workspace/dir/hello.sh") || !slices.Contains(paths, "/workspace/b.bin") {
		t.Errorf("list_files = %v", paths)
	}
	if v := ok(t, cs, "get_volume_path", map[string]any{"session_id": id}); len(v.S["volumes"].([]any)) != 0 {
		t.Errorf("volumes = %v", v.S)
	}
}
