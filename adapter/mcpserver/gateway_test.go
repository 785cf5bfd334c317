package mcpserver_test

import (
	"context"
	"log/slog"
	"maps"
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

func promptNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListPrompts(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range res.Prompts {
		names = append(names, p.Name)
	}
	return names
}

func resourceURIs(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListResources(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI)
	}
	return uris
}

func readText(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	if len(res.Contents) != 1 || res.Contents[0].URI != uri {
		t.Fatalf("read %s: %+v", uri, res.Contents)
	}
	return res.Contents[0].Text
}

func promptText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]string) string {
	t.Helper()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("get %s: %+v", name, res.Messages)
	}
	tc, _ := res.Messages[0].Content.(*mcp.TextContent)
	if tc == nil {
		t.Fatalf("get %s: %T", name, res.Messages[0].Content)
	}
	return tc.Text
}

// eventually polls until cond holds, for what arrives with list_changed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 200 {
			t.Fatal(what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGatewayPromptsResources: the hosted servers' prompts are listed as
// server__prompt and their resources under their own URIs, each server's
// apart, and both are forwarded to the owner's instance.
// "other" also lists nulls, a relative URI and a broken template, which
// are skipped (go-sdk would panic on the last two).
func TestGatewayPromptsResources(t *testing.T) {
	e, h := gatewayEnv(t)
	src, _ := os.ReadFile("../../hosted/testdata/server.py")
	for name, env := range map[string]map[string]string{"other": {"WHO": "other", "BAD_LISTS": "1"}, "plain": {"WHO": "plain", "TOOLS_ONLY": "1"}} {
		env["SRC"] = string(src)
		if err := h.Add(hosted.Server{Name: name, Command: `exec python3 -c "$SRC"`, Env: env}); err != nil {
			t.Fatal(err)
		}
	}
	promptsChanged := make(chan struct{}, 16)
	cs := e.connect(t, "alice", &mcp.ClientOptions{PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
		select {
		case promptsChanged <- struct{}{}:
		default:
		}
	}})
	if caps := cs.InitializeResult().Capabilities; caps.Prompts == nil || caps.Resources == nil || caps.Resources.Subscribe {
		t.Errorf("capabilities: %+v", caps)
	}

	t.Run("prompts", func(t *testing.T) {
		res, err := cs.ListPrompts(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*mcp.Prompt{}
		for _, p := range res.Prompts {
			byName[p.Name] = p
		}
		p := byName["py__greet"]
		if p == nil || byName["other__greet"] == nil || len(p.Arguments) != 1 || p.Arguments[0].Name != "whom" || !p.Arguments[0].Required {
			t.Fatalf("prompts: %v", slices.Collect(maps.Keys(byName)))
		}
		if byName["plain__greet"] != nil {
			t.Error("a server without the prompts capability was asked for its prompts")
		}
		if got := promptText(t, cs, "py__greet", map[string]string{"whom": "bob"}); got != "py greets bob with greet" {
			t.Errorf("py__greet = %q", got)
		}
		if got := promptText(t, cs, "other__greet", map[string]string{"whom": "eve"}); got != "other greets eve with greet" {
			t.Errorf("other__greet = %q", got)
		}
		if _, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "py__nope"}); err == nil {
			t.Error("an unknown prompt was got")
		}
	})

	t.Run("resources", func(t *testing.T) {
		uris := resourceURIs(t, cs)
		for _, want := range []string{"test://py/who", "test://other/who", "test://static/hello"} {
			if n := len(slices.DeleteFunc(slices.Clone(uris), func(u string) bool { return u != want })); n != 1 {
				t.Errorf("%s listed %d times: %v", want, n, uris)
			}
		}
		if slices.Contains(uris, "test://plain/who") {
			t.Error("a server without the resources capability was asked for its resources")
		}
		if got := readText(t, cs, "test://py/who"); got != "py" {
			t.Errorf("test://py/who = %q", got)
		}
		if got := readText(t, cs, "test://other/who"); got != "other" {
			t.Errorf("test://other/who = %q", got)
		}
		// Both servers list it: the one listed first keeps it.
		if got := readText(t, cs, "test://static/hello"); got != "hello from py" && got != "hello from other" {
			t.Errorf("test://static/hello = %q", got)
		}
		tres, err := cs.ListResourceTemplates(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var tmpls []string
		for _, rt := range tres.ResourceTemplates {
			tmpls = append(tmpls, rt.URITemplate)
		}
		slices.Sort(tmpls)
		if !slices.Equal(tmpls, []string{"test://other/echo/{text}", "test://py/echo/{text}"}) {
			t.Errorf("templates: %v", tmpls)
		}
		if got := readText(t, cs, "test://other/echo/abc"); got != "abc" {
			t.Errorf("test://other/echo/abc = %q", got)
		}
		for _, uri := range []string{"test://nope/x", "test://plain/who"} {
			if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
				t.Errorf("%s was read", uri)
			}
		}
	})

	t.Run("list_changed and owners", func(t *testing.T) {
		for len(promptsChanged) > 0 {
			<-promptsChanged
		}
		bob := e.connect(t, "bob", nil)
		if !slices.Contains(promptNames(t, bob), "py__greet") {
			t.Fatalf("bob's prompts: %v", promptNames(t, bob))
		}
		ok(t, cs, "py__add_tool", map[string]any{"name": "fresh", "prompt": true})
		select {
		case <-promptsChanged:
		case <-time.After(10 * time.Second):
			t.Fatal("no prompts/list_changed after the hosted server's prompts changed")
		}
		eventually(t, "the new prompt is not listed", func() bool { return slices.Contains(promptNames(t, cs), "py__fresh") })
		if got := promptText(t, cs, "py__fresh", nil); got != "py greets nobody with fresh" {
			t.Errorf("py__fresh = %q", got)
		}
		// Bob has his own instance of py, which did not change.
		if slices.Contains(promptNames(t, bob), "py__fresh") {
			t.Error("bob sees a prompt of alice's instance")
		}
		if _, err := bob.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "py__fresh"}); err == nil {
			t.Error("bob got a prompt of alice's instance")
		}
		// Removing a server removes its prompts and resources.
		if err := h.Remove("other"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a removed server's prompts and resources are still listed", func() bool {
			return !slices.Contains(promptNames(t, cs), "other__greet") && !slices.Contains(resourceURIs(t, cs), "test://other/who")
		})
		if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "test://other/who"}); err == nil {
			t.Error("a removed server's resource was read")
		}
		if !slices.Contains(promptNames(t, cs), "py__greet") || readText(t, cs, "test://py/who") != "py" {
			t.Error("py's prompts or resources went with other")
		}
	})
}
