package httpserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox/adapter/httpserver"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// fuzzSeeds are JSON-RPC framings, valid and not, that a caller can POST.
var fuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":null,"clientInfo":{}}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":"s","method":"tools/list","params":{"cursor":"x"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_sessions","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"create_session","arguments":{"flavor":"huge","ttl":-1}}}`,
	`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_code","arguments":{"code":1,"language":[]}}}`,
	`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"nope"}}`,
	`{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
	`{"jsonrpc":"2.0","id":1,"result":{}}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"x"}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
	`[]`, `{}`, `null`, `""`, ``, `{"jsonrpc":"1.0","id":1,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":7,"params":[1,2]}`,
	`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping","method":"tools/list"}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}",
	strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	`{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}`,
}

// Modes of FuzzMCPPost: where the body goes.
const (
	modeNewSession     = iota // stateful, no session yet
	modeInSession             // stateful, in an initialised session
	modeStateless             // a 2026-07-28 client: no session at all
	modeUnknownSession        // a session id the server never issued
	modes
)

// fuzzFixture is a server whose sandboxes can never be created: a fuzzed
// body must not reach a real process (the fake runtime runs processes
// unconfined, as the test's user).
func fuzzFixture(f *testing.F) *fixture {
	rt := testutil.NewFakeRuntime()
	rt.CreateErr = errors.New("fuzz: no sandboxes")
	return newFixtureOn(f, httpserver.Options{MaxBodyBytes: 1 << 20}, rt)
}

// FuzzMCPPost posts arbitrary bodies to /mcp: the server never panics and
// always answers with a well-formed reply that is not a server error.
func FuzzMCPPost(f *testing.F) {
	fx := fuzzFixture(f)
	session := fx.initSession(f)
	for _, s := range fuzzSeeds {
		for mode := range modes {
			f.Add([]byte(s), uint8(mode))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		req, _ := http.NewRequest(http.MethodPost, fx.url+"/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		switch mode % modes {
		case modeInSession:
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		case modeStateless:
			req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		case modeUnknownSession:
			req.Header.Set("Mcp-Session-Id", "nosuchsession")
		}
		resp := doChecked(t, req)
		// A new session per input would pile up until the fuzzer runs
		// out of memory: end it.
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" && id != session {
			del, _ := http.NewRequest(http.MethodDelete, fx.url+"/mcp", nil)
			del.Header.Set("Mcp-Session-Id", id)
			doChecked(t, del)
		}
	})
}

// FuzzSSEPost posts arbitrary bodies to a legacy SSE session's message
// endpoint, with the same promises as FuzzMCPPost; replies go to the
// stream, which is drained.
func FuzzSSEPost(f *testing.F) {
	fx := fuzzFixture(f)
	endpoint := fx.drainedSSE(f)
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest(http.MethodPost, fx.url+endpoint, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if resp := doChecked(t, req); resp.StatusCode == http.StatusNotFound {
			// The session ended (a message may close it): a fresh one
			// keeps the fuzzer exploring.
			endpoint = fx.drainedSSE(t)
		}
	})
}

// initSession opens a stateful MCP session and returns its id.
func (fx *fixture) initSession(tb testing.TB) string {
	req, _ := http.NewRequest(http.MethodPost, fx.url+"/mcp", strings.NewReader(fuzzSeeds[0]))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp := doChecked(tb, req)
	id := resp.Header.Get("Mcp-Session-Id")
	if id == "" {
		tb.Fatal("initialize returned no session")
	}
	req, _ = http.NewRequest(http.MethodPost, fx.url+"/mcp", strings.NewReader(fuzzSeeds[2]))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	doChecked(tb, req)
	return id
}

// drainedSSE opens an SSE stream, reads it to its end in the background
// and returns its message endpoint. The stream lasts until the server
// ends it or closes at the fixture's cleanup, not at tb's.
func (fx *fixture) drainedSSE(tb testing.TB) string {
	resp, err := http.Get(fx.url + "/sse")
	if err != nil {
		tb.Fatal(err)
	}
	endpoint, err := readEndpoint(resp.Body)
	if err != nil {
		resp.Body.Close()
		tb.Fatal(err)
	}
	go func() {
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
	}()
	return endpoint
}

// fuzzClient gives up on a reply after the hang limit.
var fuzzClient = &http.Client{Timeout: hang}

// doChecked sends req and fails unless the reply is well formed: a
// status below 500, a JSON body that parses when it says it is JSON, SSE
// events whose data parse, and nothing after a 202.
func doChecked(tb testing.TB, req *http.Request) *http.Response {
	tb.Helper()
	resp, err := fuzzClient.Do(req)
	if err != nil {
		tb.Fatalf("no reply: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("reading the reply: %v", err)
	}
	if resp.StatusCode >= 500 {
		tb.Fatalf("server error %d: %s", resp.StatusCode, body)
	}
	if resp.StatusCode == http.StatusAccepted && len(body) != 0 {
		tb.Fatalf("202 with a body: %q", body)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		if !json.Valid(body) {
			tb.Fatalf("%d application/json reply is not JSON: %q", resp.StatusCode, body)
		}
	case "text/event-stream":
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, len(body)+1)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && !json.Valid([]byte(d)) {
				tb.Fatalf("SSE event data is not JSON: %q", d)
			}
		}
	}
	return resp
}
