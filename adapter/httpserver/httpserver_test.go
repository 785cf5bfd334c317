package httpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/httpserver"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/apikey"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

type fixture struct {
	url string
	st  *sqlite.Store
	h   *httpserver.Handler
}

func newFixture(t testing.TB, opts httpserver.Options) *fixture {
	t.Helper()
	return newFixtureOn(t, opts, testutil.NewFakeRuntime())
}

// newFixtureOn is newFixture on a given runtime.
func newFixtureOn(t testing.TB, opts httpserver.Options, rt *testutil.FakeRuntime) *fixture {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(context.Background(), &manager.Options{Runtime: rt, Store: st,
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var h *httpserver.Handler
	srv, err := mcpserver.New(mcpserver.Options{Manager: m, OnCall: func(tool, code string, d time.Duration) { h.Metrics().ToolCall(tool, code, d) }})
	if err != nil {
		t.Fatal(err)
	}
	opts.MCP, opts.Manager, opts.Keys, opts.Version, opts.Runtime = srv, m, st, "test", "fake"
	h = httpserver.New(opts)
	return &fixture{url: serve(t, h), st: st, h: h}
}

// serve runs h the way mcpbox serve does, on its own server and bounded
// listener, and returns its base URL.
func serve(t testing.TB, h *httpserver.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h.Server()
	go srv.Serve(h.Listener(ln))
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func (f *fixture) key(t *testing.T, owner string) (string, *mcpbox.APIKey) {
	t.Helper()
	secret, k, hash, err := apikey.Generate(owner, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.PutKey(context.Background(), k, hash); err != nil {
		t.Fatal(err)
	}
	return secret, k
}

type headers map[string]string

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// client connects over Streamable HTTP (or SSE) with extra headers.
func (f *fixture) client(t *testing.T, sse bool, h headers) (*mcp.ClientSession, error) {
	t.Helper()
	hc := &http.Client{Transport: h}
	var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: f.url + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}
	if sse {
		tr = &mcp.SSEClientTransport{Endpoint: f.url + "/sse", HTTPClient: hc}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	var m map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &m)
	return m
}

func TestAuth(t *testing.T) {
	f := newFixture(t, httpserver.Options{})

	// Before any key exists, callers are the local owner.
	if _, err := f.client(t, false, nil); err != nil {
		t.Fatalf("keyless server refused a keyless client: %v", err)
	}
	alice, _ := f.key(t, "alice")
	bob, bobKey := f.key(t, "bob")
	time.Sleep(1100 * time.Millisecond) // the server rechecks for keys once a second

	for _, path := range []string{"/mcp", "/sse"} {
		for name, h := range map[string]headers{"no key": {}, "bad key": {"Authorization": "Bearer mcpbox_nope"}, "bad X-API-Key": {"X-API-Key": "nope"}} {
			req, _ := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s: status %d, want 401", path, name, resp.StatusCode)
			}
		}
	}

	for _, sse := range []bool{false, true} {
		a, err := f.client(t, sse, headers{"Authorization": "Bearer " + alice})
		if err != nil {
			t.Fatal(err)
		}
		b, err := f.client(t, sse, headers{"X-API-Key": bob})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("alice create_session: %v %v", err, res)
		}
		id := structured(t, res)["session_id"].(string)
		res, err = b.CallTool(ctx, &mcp.CallToolParams{Name: "stop_session", Arguments: map[string]any{"session_id": id}})
		if err != nil || !res.IsError || structured(t, res)["error_code"] != mcpbox.ESESSION {
			t.Errorf("bob stopping alice's session (sse %v): %v %+v", sse, err, res)
		}
		res, err = b.CallTool(ctx, &mcp.CallToolParams{Name: "get_sessions", Arguments: map[string]any{}})
		if err != nil || len(structured(t, res)["sessions"].([]any)) != 0 {
			t.Errorf("bob sees sessions: %v %+v", err, res)
		}
		res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "get_sessions", Arguments: map[string]any{"session_id": id}})
		if err != nil || res.IsError {
			t.Errorf("alice lost her session: %v %+v", err, res)
		}
	}

	// A revoked key stops working.
	if err := f.st.RevokeKey(context.Background(), bobKey.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client(t, false, headers{"X-API-Key": bob}); err == nil {
		t.Error("a revoked key still connects")
	}
}

func TestSSESessionBoundToOwner(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	alice, _ := f.key(t, "alice")
	bob, _ := f.key(t, "bob")
	req, _ := http.NewRequest(http.MethodGet, f.url+"/sse", nil)
	req.Header.Set("X-API-Key", alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	_, endpoint, ok := strings.Cut(string(buf[:n]), "data: ")
	if !ok {
		t.Fatalf("no endpoint event: %q", buf[:n])
	}
	endpoint = strings.TrimSpace(endpoint)
	post := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, f.url+endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(bob); got != http.StatusNotFound {
		t.Errorf("bob posting into alice's SSE session: %d, want 404", got)
	}
	if got := post(alice); got != http.StatusAccepted {
		t.Errorf("alice posting into her SSE session: %d, want 202", got)
	}
}

func TestOriginHostAndCORS(t *testing.T) {
	f := newFixture(t, httpserver.Options{CORSOrigins: []string{"https://app.example.com"}})
	do := func(method, path string, h headers) *http.Response {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range h {
			if k == "Host" {
				req.Host = v
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/mcp", "/sse"} {
		if r := do(http.MethodPost, path, headers{"Origin": "https://evil.example"}); r.StatusCode != http.StatusForbidden {
			t.Errorf("%s: foreign Origin got %d, want 403", path, r.StatusCode)
		}
		if r := do(http.MethodGet, path, headers{"Origin": "https://evil.example"}); r.StatusCode != http.StatusForbidden {
			t.Errorf("%s: GET with a foreign Origin got %d, want 403", path, r.StatusCode)
		}
		if r := do(http.MethodPost, path, headers{"Host": "evil.example:80"}); r.StatusCode != http.StatusForbidden {
			t.Errorf("%s: rebinding Host got %d, want 403", path, r.StatusCode)
		}
		r := do(http.MethodOptions, path, headers{"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"})
		if r.StatusCode != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
			!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Mcp-Session-Id") {
			t.Errorf("%s: preflight from an allowed origin: %d %v", path, r.StatusCode, r.Header)
		}
	}
	if r := do(http.MethodPost, "/mcp", headers{"Origin": "https://app.example.com"}); r.StatusCode != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("allowed origin: %d %v", r.StatusCode, r.Header)
	}
}

func TestBodyLimit(t *testing.T) {
	f := newFixture(t, httpserver.Options{MaxBodyBytes: 1 << 20})
	body := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`
	req, _ := http.NewRequest(http.MethodPost, f.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("2 MiB body against a 1 MiB limit: %d, want 413", resp.StatusCode)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	get := func(path string) (int, string) {
		resp, err := http.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cs, err := f.client(t, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
	cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "stop_session", Arguments: map[string]any{"session_id": "nope"}})
	for _, path := range []string{"/", "/healthz"} {
		code, body := get(path)
		var h map[string]any
		if code != 200 || json.Unmarshal([]byte(body), &h) != nil || h["status"] != "ok" || h["version"] != "test" || h["runtime"] != "fake" || h["sessions"] != float64(1) {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, "ready") {
		t.Errorf("/readyz: %d %s", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{"mcpbox_sessions 1", `mcpbox_tool_calls_total{outcome="ok",tool="create_session"} 1`,
		`mcpbox_errors_total{code="SESSION_NOT_FOUND"} 1`, "mcpbox_tool_call_duration_seconds_bucket"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestEndpointsWithKeys: once keys exist, /metrics needs one like /mcp
// does (it counts every owner's sessions and calls), probes stay open, and
// /healthz tells a caller without a key no counts.
func TestEndpointsWithKeys(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	key, _ := f.key(t, "alice")
	tests := []struct {
		path     string
		key      string
		want     int
		sessions bool // the body reports the live sessions
	}{
		{"/metrics", "", http.StatusUnauthorized, false},
		{"/metrics", "mcpbox_nope", http.StatusUnauthorized, false},
		{"/metrics", key, http.StatusOK, true},
		{"/healthz", "", http.StatusOK, false},
		{"/healthz", "mcpbox_nope", http.StatusOK, false},
		{"/healthz", key, http.StatusOK, true},
		{"/", "", http.StatusOK, false},
		{"/readyz", "", http.StatusOK, false},
	}
	for _, tt := range tests {
		name := tt.path + " no key"
		switch tt.key {
		case key:
			name = tt.path + " with key"
		case "mcpbox_nope":
			name = tt.path + " bad key"
		}
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, f.url+tt.path, nil)
			if tt.key != "" {
				req.Header.Set("X-API-Key", tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
			if got := strings.Contains(string(b), "sessions"); got != tt.sessions {
				t.Errorf("reports sessions: %v, want %v: %s", got, tt.sessions, b)
			}
		})
	}
}
