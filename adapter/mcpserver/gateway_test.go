package mcpserver_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
)

// gatewayEnv is an MCP server with the gateway on, over the fake runtime,
// hosting the test server of package hosted as "py".
func gatewayEnv(t *testing.T) (*env, *hosted.Hosts) {
	t.Helper()
	src, err := os.ReadFile("../../hosted/testdata/server.py")
	if err != nil {
		t.Fatal(err)
	}
	rt := testutil.NewFakeRuntime()
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: rt, WarmKernel: noWarm})
	h, err := hosted.New(&hosted.Options{Manager: e.m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.Add(hosted.Server{Name: "py", Command: `exec python3 -c "$SRC"`, Env: map[string]string{"SRC": string(src), "WHO": "py"}}); err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Options{Manager: e.m, Hosted: h})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	return e, h
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

func TestGateway(t *testing.T) {
	e, h := gatewayEnv(t)
	listChanged := make(chan struct{}, 16)
	cs := e.connect(t, "alice", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case listChanged <- struct{}{}:
		default:
		}
	}})
	// The first listing waits for the hosted server's discovery.
	names := toolNames(t, cs)
	for _, want := range []string{"execute_code", "py__env", "py__slow", "py__add_tool", "py__installs"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	if r := ok(t, cs, "py__env", map[string]any{"name": "WHO"}); r.text() != "py" {
		t.Errorf("py__env = %q", r.text())
	}
	// Tool errors of the server pass through as they are.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "py__crash"})
	if err != nil || !res.IsError || !strings.Contains((result{CallToolResult: res}).text(), "dying on purpose") {
		t.Errorf("py__crash: %v %+v", err, res)
	}

	t.Run("progress and cancel", func(t *testing.T) {
		var mu sync.Mutex
		var got []float64
		pcs := e.connect(t, "alice", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, r.Params.Progress)
			mu.Unlock()
		}})
		p := &mcp.CallToolParams{Name: "py__slow", Arguments: map[string]any{"steps": 3}}
		p.SetProgressToken("tok")
		res, err := pcs.CallTool(context.Background(), p)
		if err != nil || (result{CallToolResult: res}).text() != "done 3" {
			t.Fatalf("py__slow: %v %v", err, res)
		}
		// go-sdk's client hands a response to its caller as it reads it,
		// while notifications read before it wait their turn in the
		// handler's queue: the last progress may be handled just after
		// CallTool returns.
		last := func() []float64 {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(got)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if g := last(); len(g) > 0 && g[len(g)-1] == 3 {
				break
			}
		}
		if g := last(); len(g) < 3 || !slices.IsSorted(g) || g[len(g)-1] != 3 {
			t.Errorf("progress = %v", g)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := pcs.CallTool(ctx, &mcp.CallToolParams{Name: "py__slow", Arguments: map[string]any{"steps": 1000}}); err == nil {
			t.Fatal("a cancelled call returned")
		}
		for i := 0; ; i++ {
			if ok(t, cs, "py__cancelled", nil).text() != "[]" {
				break
			}
			if i == 100 {
				t.Fatal("the cancellation did not reach the hosted server")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("list_changed", func(t *testing.T) {
		for len(listChanged) > 0 {
			<-listChanged
		}
		ok(t, cs, "py__add_tool", map[string]any{"name": "fresh.tool/x"})
		select {
		case <-listChanged:
		case <-time.After(10 * time.Second):
			t.Fatal("no tools/list_changed after the hosted server's tools changed")
		}
		for i := 0; !slices.Contains(toolNames(t, cs), "py__fresh_tool_x"); i++ {
			if i == 100 {
				t.Fatalf("the new tool is not listed: %v", toolNames(t, cs))
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Removing the server removes its tools.
		if err := h.Remove("py"); err != nil {
			t.Fatal(err)
		}
		for i := 0; slices.Contains(toolNames(t, cs), "py__env"); i++ {
			if i == 100 {
				t.Fatal("a removed server's tools are still listed")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func TestGatewayNames(t *testing.T) {
	for _, c := range []struct{ server, tool, want string }{
		{"fs", "read_file", "fs__read_file"},
		{"fs", "a.b/c d", "fs__a_b_c_d"},
		{"s", strings.Repeat("x", 80), ""},
	} {
		got := mcpserver.GatewayName(c.server, c.tool)
		if c.want != "" && got != c.want {
			t.Errorf("GatewayName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
		if len(got) > 64 || strings.Trim(got, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Errorf("GatewayName(%q, %q) = %q: not a strict tool name", c.server, c.tool, got)
		}
	}
	a, b := mcpserver.GatewayName("s", strings.Repeat("x", 80)+"1"), mcpserver.GatewayName("s", strings.Repeat("x", 80)+"2")
	if a == b {
		t.Errorf("two long names cut to the same %q", a)
	}
}

// TestGatewayCollision: two hosted tools that end up with one name are
// not both listed, and nothing else suffers.
func TestGatewayCollision(t *testing.T) {
	e, h := gatewayEnv(t)
	var logs lockedBuffer
	srv, err := mcpserver.New(mcpserver.Options{Manager: e.m, Hosted: h, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	src, _ := os.ReadFile("../../hosted/testdata/server.py")
	for _, name := range []string{"x", "x__y"} {
		if err := h.Add(hosted.Server{Name: name, Command: `exec python3 -c "$SRC"`, Env: map[string]string{"SRC": string(src)}}); err != nil {
			t.Fatal(err)
		}
	}
	cs := e.connect(t, "alice", nil)
	toolNames(t, cs) // discovery done
	ok(t, cs, "x__add_tool", map[string]any{"name": "y__z"})
	ok(t, cs, "x__y__add_tool", map[string]any{"name": "z"})
	var names []string
	for i := 0; ; i++ {
		names = toolNames(t, cs)
		if slices.Contains(names, "x__y__z") && slices.Contains(names, "x__y__count") {
			break
		}
		if i == 100 {
			t.Fatalf("tools: %v", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n := 0
	for _, name := range names {
		if name == "x__y__z" {
			n++
		}
	}
	if n != 1 || !slices.Contains(names, "x__count") || !slices.Contains(names, "py__count") {
		t.Errorf("after a collision: %d x__y__z, tools %v", n, names)
	}
	for i := 0; !strings.Contains(logs.String(), "collision"); i++ {
		if i == 100 {
			t.Fatalf("the collision was not reported:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
