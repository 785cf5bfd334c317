package hosted_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// pyServer is the test MCP server's source, passed in its env so that it
// reaches any sandbox without a file: the command line stays short.
func pyServer(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/server.py")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pyDef is a definition of the test server.
func pyDef(t testing.TB, name string, env map[string]string) hosted.Server {
	e := map[string]string{"MCP_TEST_SERVER": pyServer(t)}
	for k, v := range env {
		e[k] = v
	}
	return hosted.Server{Name: name, Command: `exec python3 -c "$MCP_TEST_SERVER"`, Env: e}
}

// newHosts returns Hosts on a manager over the fake runtime, whose
// sandboxes are an in-process agent running processes on this host.
func newHosts(t testing.TB, opts hosted.Options) (*hosted.Hosts, *manager.Manager) {
	t.Helper()
	rt := testutil.NewFakeRuntime()
	m, err := manager.New(context.Background(), &manager.Options{Runtime: rt, Store: memstore.New(),
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	opts.Manager = m
	h, err := hosted.New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		m.StopAll(context.Background())
	})
	return h, m
}

func text(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func call(t testing.TB, h *hosted.Hosts, owner, server, tool string, args any) string {
	t.Helper()
	res, err := h.Call(context.Background(), owner, server, tool, args, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", server, tool, err)
	}
	if res.IsError {
		t.Fatalf("%s %s: isError: %s", server, tool, text(t, res))
	}
	return text(t, res)
}

// TestListChangedDuringHandshake: a server may say its tools changed
// before the handshake is over, when there is no session to list them on
// yet. The listing waits for the start (which lists them itself), and
// the server works.
func TestListChangedDuringHandshake(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "py", map[string]string{"EARLY_LIST_CHANGED": "1"})); err != nil {
		t.Fatal(err)
	}
	tools, err := h.Tools(context.Background(), "alice", "py", nil)
	if err != nil || len(tools) != 8 {
		t.Fatalf("tools: %d, %v", len(tools), err)
	}
	if got := call(t, h, "alice", "py", "echo", map[string]any{"x": "hi"}); got != `{"x": "hi"}` {
		t.Errorf("echo: %q", got)
	}
}

func TestHandshakeToolsAndEnv(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "py", map[string]string{"SECRET": "s3cret value", "SLOW_START": "1"})); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var progress []string
	var mu sync.Mutex
	tools, err := h.Tools(ctx, "alice", "py", &hosted.CallOptions{OnProgress: func(p hosted.Progress) {
		mu.Lock()
		progress = append(progress, p.Message)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	// Eight tools, two a page: every cursor was followed, after a start
	// that answered the handshake a second late.
	if want := []string{"env", "crash", "count", "echo", "slow", "cancelled", "add_tool", "installs"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	mu.Lock()
	if len(progress) == 0 {
		t.Error("no progress while the server started")
	}
	mu.Unlock()
	if got := call(t, h, "alice", "py", "env", map[string]any{"name": "SECRET"}); got != "s3cret value" {
		t.Errorf("SECRET in the server = %q", got)
	}
	// The host's environment does not reach it.
	if got := call(t, h, "alice", "py", "env", map[string]any{"name": "GOPATH"}); got != "<unset>" && os.Getenv("GOPATH") != "" {
		t.Errorf("GOPATH reached the server: %q", got)
	}
	// A tool error is the server's answer, not a failure of the call.
	res, err := h.Call(ctx, "alice", "py", "nope", nil, nil)
	if err != nil || !res.IsError {
		t.Errorf("unknown tool: %v %+v", err, res)
	}
	if _, err := h.Call(ctx, "alice", "py", "echo", []int{1}, nil); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("array arguments: %v, want %s", err, mcpbox.EINVALID)
	}
	if _, err := h.Call(ctx, "alice", "nosuch", "echo", nil, nil); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
		t.Errorf("unknown server: %v, want %s", err, mcpbox.ENOTFOUND)
	}
}

func TestCrashRestart(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "py", nil)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got := call(t, h, "alice", "py", "count", nil); got != "1" {
		t.Fatalf("count = %s", got)
	}
	_, err := h.Call(ctx, "alice", "py", "crash", nil, nil)
	if mcpbox.ErrorCode(err) != mcpbox.EUNAVAILABLE || !strings.Contains(err.Error(), "dying on purpose") {
		t.Fatalf("crash: %v, want %s with the stderr tail", err, mcpbox.EUNAVAILABLE)
	}
	// Started again: a fresh process, so the counter starts over.
	if got := call(t, h, "alice", "py", "count", nil); got != "1" {
		t.Errorf("count after the restart = %s, want 1", got)
	}
}

func TestKeepsCrashing(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(hosted.Server{Name: "bad", Command: "echo 'cannot find module foo' >&2; exit 1"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last error
	for range 8 {
		_, last = h.Call(ctx, "alice", "bad", "x", nil, nil)
		if last == nil {
			t.Fatal("a server that exits at once answered")
		}
		if !strings.Contains(last.Error(), "cannot find module foo") {
			t.Errorf("error without the stderr tail: %v", last)
		}
		if strings.Contains(last.Error(), "keeps crashing") {
			break
		}
	}
	if !strings.Contains(last.Error(), "keeps crashing") || mcpbox.ErrorCode(last) != mcpbox.EUNAVAILABLE {
		t.Errorf("after repeated crashes: %v, want a keeps-crashing report", last)
	}
}

func TestListChanged(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "py", nil)); err != nil {
		t.Fatal(err)
	}
	changed := make(chan hosted.Change, 16)
	defer h.Watch(func(c hosted.Change) { changed <- c })()
	call(t, h, "alice", "py", "add_tool", map[string]any{"name": "fresh"})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-changed:
			if c.Server != "py" || !c.Tools {
				continue
			}
			tools, ok := h.CachedTools("alice", "py")
			if ok && slices.ContainsFunc(tools, func(t *mcp.Tool) bool { return t.Name == "fresh" }) {
				return
			}
		case <-deadline:
			t.Fatal("no tools change with the new tool after list_changed")
		}
	}
}

func TestProgressAndCancel(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "py", nil)); err != nil {
		t.Fatal(err)
	}
	call(t, h, "alice", "py", "count", nil) // started
	var mu sync.Mutex
	var got []hosted.Progress
	res, err := h.Call(context.Background(), "alice", "py", "slow", map[string]any{"steps": 3}, &hosted.CallOptions{OnProgress: func(p hosted.Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}})
	if err != nil || text(t, res) != "done 3" {
		t.Fatalf("slow: %v %v", err, res)
	}
	mu.Lock()
	if len(got) != 3 || got[2].Progress != 3 || got[2].Total != 3 || got[2].Message != "step 3" {
		t.Errorf("progress = %+v", got)
	}
	mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{}, 1)
	go func() {
		<-first
		cancel()
	}()
	_, err = h.Call(ctx, "alice", "py", "slow", map[string]any{"steps": 1000}, &hosted.CallOptions{OnProgress: func(hosted.Progress) {
		select {
		case first <- struct{}{}:
		default:
		}
	}})
	if err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	// The cancellation reached the server.
	for i := 0; ; i++ {
		if got := call(t, h, "alice", "py", "cancelled", nil); got != "[]" {
			break
		}
		if i == 100 {
			t.Fatal("the server never heard of the cancellation")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOwnersAndScope(t *testing.T) {
	h, m := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "mine", nil)); err != nil {
		t.Fatal(err)
	}
	shared := pyDef(t, "ours", nil)
	shared.Scope = hosted.ScopeShared
	if err := h.Add(shared); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Owner scope: alice and bob each have their own instance and sandbox.
	call(t, h, "alice", "mine", "count", nil)
	if got := call(t, h, "alice", "mine", "count", nil); got != "2" {
		t.Errorf("alice's second count = %s", got)
	}
	if got := call(t, h, "bob", "mine", "count", nil); got != "1" {
		t.Errorf("bob's first count = %s, want 1: he shares alice's server", got)
	}
	for _, owner := range []string{"alice", "bob"} {
		list, err := m.List(ctx, owner, mcpbox.SessionFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 {
			t.Errorf("%s has %d sessions, want 1 (her own server's)", owner, len(list))
		}
	}
	// Shared scope: one instance, in neither owner's sessions; each
	// caller gets only the answer to its own arguments.
	var wg sync.WaitGroup
	for i, owner := range []string{"alice", "bob", "alice", "bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := owner + "-" + string(rune('0'+i))
			res, err := h.Call(ctx, owner, "ours", "echo", map[string]any{"who": want}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			if got := text(t, res); got != `{"who": "`+want+`"}` {
				t.Errorf("%s got %s", want, got)
			}
		}()
	}
	wg.Wait()
	call(t, h, "alice", "ours", "count", nil)
	if got := call(t, h, "bob", "ours", "count", nil); got != "2" {
		t.Errorf("shared count for bob = %s, want 2", got)
	}
	if list, _ := m.List(ctx, "alice", mcpbox.SessionFilter{}); len(list) != 1 {
		t.Errorf("alice has %d sessions with a shared server running, want 1", len(list))
	}
}

func TestIdleStop(t *testing.T) {
	h, m := newHosts(t, hosted.Options{})
	def := pyDef(t, "py", nil)
	def.TimeoutMinutes = 0.005 // 300 ms
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call(t, h, "alice", "py", "count", nil)
	for i := 0; ; i++ {
		list, err := m.List(ctx, "alice", mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		if i == 200 {
			t.Fatal("the idle server's session is still running")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The next call starts it again.
	if got := call(t, h, "alice", "py", "count", nil); got != "1" {
		t.Errorf("count after the idle stop = %s, want 1", got)
	}
}

func TestInstallCommands(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	def := pyDef(t, "py", nil)
	def.InstallCommands = []string{"echo ran >> installs", "test -s installs"}
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	if got := call(t, h, "alice", "py", "installs", nil); got != "1" {
		t.Errorf("installs = %s, want 1", got)
	}
	bad := pyDef(t, "broken", nil)
	bad.InstallCommands = []string{"echo no such package >&2; exit 7"}
	if err := h.Add(bad); err != nil {
		t.Fatal(err)
	}
	_, err := h.Call(context.Background(), "alice", "broken", "count", nil, nil)
	if mcpbox.ErrorCode(err) != mcpbox.ECOMMAND || !strings.Contains(err.Error(), "no such package") {
		t.Errorf("failed install: %v, want %s with its output", err, mcpbox.ECOMMAND)
	}
}

func TestDefinitionChangeRestarts(t *testing.T) {
	h, _ := newHosts(t, hosted.Options{})
	if err := h.Add(pyDef(t, "py", map[string]string{"V": "1"})); err != nil {
		t.Fatal(err)
	}
	if got := call(t, h, "alice", "py", "env", map[string]any{"name": "V"}); got != "1" {
		t.Fatal(got)
	}
	if err := h.Add(pyDef(t, "py", map[string]string{"V": "2"})); err != nil {
		t.Fatal(err)
	}
	if got := call(t, h, "alice", "py", "env", map[string]any{"name": "V"}); got != "2" {
		t.Errorf("after redefining: V = %s, want 2", got)
	}
	if err := h.Remove("py"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(context.Background(), "alice", "py", "count", nil, nil); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
		t.Errorf("call after remove: %v", err)
	}
}

func TestServersFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cfg", "servers.json")
	// e2b-mcp's own file, as its CLI writes it.
	os.MkdirAll(filepath.Dir(path), 0o700)
	e2b := `{"github": {"command": "npx -y @modelcontextprotocol/server-github", "env": {"GITHUB_TOKEN": "t"},
	  "timeout_minutes": 10, "install_commands": [], "description": "GitHub"}}`
	if err := os.WriteFile(path, []byte(e2b), 0o600); err != nil {
		t.Fatal(err)
	}
	h, _ := newHosts(t, hosted.Options{File: path, WatchInterval: 50 * time.Millisecond})
	list, err := h.Servers()
	if err != nil || len(list) != 1 || list[0].Name != "github" || list[0].Env["GITHUB_TOKEN"] != "t" || list[0].Description != "GitHub" {
		t.Fatalf("servers = %+v, %v", list, err)
	}
	changed := make(chan hosted.Change, 16)
	defer h.Watch(func(c hosted.Change) { changed <- c })()
	if err := h.AddMap("fs", map[string]any{"command": "npx -y @modelcontextprotocol/server-filesystem /workspace", "scope": "shared"}); err != nil {
		t.Fatal(err)
	}
	if c := <-changed; c.Server != "fs" || c.Removed {
		t.Errorf("change = %+v", c)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("servers.json mode %v, %v: env holds secrets", fi.Mode(), err)
	}
	var onDisk map[string]map[string]any
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &onDisk); err != nil || onDisk["fs"]["command"] == nil || onDisk["github"]["env"] == nil {
		t.Errorf("servers.json = %s", b)
	}
	// Another process's edit is noticed.
	other, err := hosted.New(&hosted.Options{Manager: mustManager(t), File: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Remove("github"); err != nil {
		t.Fatal(err)
	}
	other.Close()
	select {
	case c := <-changed:
		if c.Server != "github" || !c.Removed {
			t.Errorf("change = %+v", c)
		}
	case <-time.After(10 * time.Second):
		t.Error("a removal by another process went unnoticed")
	}
	for _, bad := range []hosted.Server{
		{Name: "a b", Command: "x"}, {Name: "", Command: "x"}, {Name: "a.b", Command: "x"}, {Name: "ok"},
		{Name: strings.Repeat("a", 49), Command: "x"}, {Name: "ok", Command: "x", Scope: "world"},
		{Name: "ok", Command: "x", Volumes: []string{"relative:/x"}},
	} {
		if err := h.Add(bad); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("Add(%+v) = %v, want %s", bad, err, mcpbox.EINVALID)
		}
	}
	if err := h.AddMap("x", map[string]any{"command": "y", "comand": "typo"}); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("unknown field: %v", err)
	}
	// A broken file is an error that says how to fix it.
	os.WriteFile(path, []byte("{not json"), 0o600)
	time.Sleep(20 * time.Millisecond)
	os.Chtimes(path, time.Now(), time.Now().Add(time.Second))
	if _, err := h.Servers(); err == nil || !strings.Contains(strings.Join(mcpbox.ErrorSuggestions(err), " "), "--edit") {
		t.Errorf("broken file: %v", err)
	}
	if err := h.Reset(); err != nil {
		t.Fatal(err)
	}
	if list, err := h.Servers(); err != nil || len(list) != 0 {
		t.Errorf("after reset: %v %v", list, err)
	}
}

func mustManager(t testing.TB) *manager.Manager {
	m, err := manager.New(context.Background(), &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: memstore.New(),
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// catalog is a template catalog and install cache for the fake runtime,
// whose sandboxes do not look at their template: what it tells is
// whether the install ran again.
type catalog struct {
	mu      sync.Mutex
	names   map[string]bool
	commits []string
}

func (c *catalog) Template(_ context.Context, name string, _ func(string)) (*mcpbox.Template, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.names[name] {
		return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "no template %q", name)
	}
	return &mcpbox.Template{Name: name}, nil
}

func (c *catalog) Templates(context.Context) ([]*mcpbox.Template, error) { return nil, nil }

func (c *catalog) Exists(ctx context.Context, name string) bool {
	_, err := c.Template(ctx, name, nil)
	return err == nil
}

func (c *catalog) Commit(_ context.Context, id, name string, _ func(string)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names[name] = true
	c.commits = append(c.commits, name)
	return nil
}

func TestInstallCache(t *testing.T) {
	cat := &catalog{names: map[string]bool{"tools": true}}
	m, err := manager.New(context.Background(), &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: memstore.New(), Templates: cat,
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hosted.New(&hosted.Options{Manager: m, Templates: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The fake runtime runs processes on this host: the install leaves
	// its mark here.
	marker := filepath.Join(t.TempDir(), "installs")
	def := pyDef(t, "py", nil)
	def.Template = "tools"
	def.InstallCommands = []string{"echo ran >> " + marker}
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		b, _ := os.ReadFile(marker)
		return strings.Count(string(b), "ran")
	}
	var progress []string
	opts := &hosted.CallOptions{OnProgress: func(p hosted.Progress) { progress = append(progress, p.Message) }}
	if _, err := h.Call(context.Background(), "alice", "py", "count", nil, opts); err != nil {
		t.Fatal(err)
	}
	if runs() != 1 || len(cat.commits) != 1 {
		t.Fatalf("first start: %d installs, commits %v", runs(), cat.commits)
	}
	// A second start (bob's, and alice's after a stop) skips the install.
	call(t, h, "bob", "py", "count", nil)
	if err := h.Stop("alice", "py"); err != nil {
		t.Fatal(err)
	}
	call(t, h, "alice", "py", "count", nil)
	if runs() != 1 || len(cat.commits) != 1 {
		t.Errorf("later starts: %d installs, commits %v, want the install once", runs(), cat.commits)
	}
	// A definition whose install changes installs again, under a new name.
	def.InstallCommands = append(def.InstallCommands, "true")
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	call(t, h, "alice", "py", "count", nil)
	if runs() != 2 || len(cat.commits) != 2 || cat.commits[0] == cat.commits[1] {
		t.Errorf("after the change: %d installs, commits %v", runs(), cat.commits)
	}
	// Other changes (its description) keep the cache.
	def.Description = "now described"
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	call(t, h, "alice", "py", "count", nil)
	if runs() != 2 {
		t.Errorf("a description change reran the install")
	}
}

// TestHostileServers: what a server sends is bounded, and one that never
// answers is given up on at the handshake timeout.
func TestHostileServers(t *testing.T) {
	h, m := newHosts(t, hosted.Options{HandshakeTimeout: 2 * time.Second})
	ctx := context.Background()
	for _, c := range []struct {
		name, command, code, says string
	}{
		{"mute", "echo 'thinking' >&2; sleep 600", mcpbox.ETIMEOUT, "did not answer the MCP handshake within 2s"},
		{"noise", "yes 'not json' | head -n 100000; sleep 600", mcpbox.ETIMEOUT, "did not answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := h.Add(hosted.Server{Name: c.name, Command: c.command}); err != nil {
				t.Fatal(err)
			}
			_, err := h.Tools(ctx, "alice", c.name, nil)
			if mcpbox.ErrorCode(err) != c.code || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v, want %s saying %q", c.name, err, c.code, c.says)
			}
		})
	}
	t.Run("flood", func(t *testing.T) {
		// 40 MiB on one line: past the 32 MiB a message may have. The
		// handshake timeout is long enough for it to arrive.
		h, _ := newHosts(t, hosted.Options{HandshakeTimeout: 2 * time.Minute})
		if err := h.Add(hosted.Server{Name: "flood", Command: "head -c 41943040 /dev/zero | tr '\\0' x; sleep 600"}); err != nil {
			t.Fatal(err)
		}
		_, err := h.Tools(ctx, "alice", "flood", nil)
		if mcpbox.ErrorCode(err) != mcpbox.EUNAVAILABLE || !strings.Contains(err.Error(), "larger than 32 MiB") {
			t.Errorf("flood: %v, want %s saying the message is too large", err, mcpbox.EUNAVAILABLE)
		}
	})
	// Nothing is left running: every failed start stopped its session.
	for i := 0; ; i++ {
		list, err := m.List(ctx, "alice", mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("%d sessions of failed starts still run", len(list))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
