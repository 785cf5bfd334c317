package httpserver_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/adapter/httpserver"
)

// rpcReply is a JSON-RPC response as the tests read it.
type rpcReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// post sends one JSON-RPC message to /mcp and returns the response, the
// reply it carries (as plain JSON or as an SSE event), if any, and the
// response's headers.
func (f *fixture) post(t *testing.T, hdr map[string]string, body string) (int, *rpcReply, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var data []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = []byte(d)
				break
			}
		}
	} else {
		data, _ = io.ReadAll(resp.Body)
	}
	if len(data) == 0 || resp.StatusCode >= 300 {
		return resp.StatusCode, nil, resp.Header
	}
	var r rpcReply
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("reply to %s: %v in %q", body, err, data)
	}
	return resp.StatusCode, &r, resp.Header
}

// TestSpecRevisions drives /mcp by hand at each stateful revision of the
// protocol a client may speak: the server must agree to the revision the
// client asks for and then serve it tools, sessions included.
func TestSpecRevisions(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	for _, rev := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(rev, func(t *testing.T) {
			status, r, h := f.post(t, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+rev+
				`","capabilities":{},"clientInfo":{"name":"by-hand","version":"1"}}}`)
			if status != http.StatusOK || r == nil || r.Error != nil {
				t.Fatalf("initialize: %d %+v", status, r)
			}
			var init struct {
				ProtocolVersion string `json:"protocolVersion"`
				Capabilities    struct {
					Tools *struct{} `json:"tools"`
				} `json:"capabilities"`
			}
			json.Unmarshal(r.Result, &init)
			if init.ProtocolVersion != rev || init.Capabilities.Tools == nil {
				t.Fatalf("initialize answered %s, want revision %s with tools", r.Result, rev)
			}
			sid := h.Get("Mcp-Session-Id")
			if sid == "" {
				t.Fatal("no Mcp-Session-Id on the initialize response")
			}
			hdr := map[string]string{"Mcp-Session-Id": sid}
			// From 2025-06-18 on, every later request names the revision.
			if rev >= "2025-06-18" {
				hdr["MCP-Protocol-Version"] = rev
			}
			if status, _, _ := f.post(t, hdr, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != http.StatusAccepted {
				t.Fatalf("notifications/initialized: %d, want 202", status)
			}

			status, r, _ = f.post(t, hdr, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			if status != http.StatusOK || r == nil || r.Error != nil || !strings.Contains(string(r.Result), `"execute_code"`) {
				t.Fatalf("tools/list: %d %+v", status, r)
			}
			status, r, _ = f.post(t, hdr, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_session","arguments":{}}}`)
			if status != http.StatusOK || r == nil || r.Error != nil {
				t.Fatalf("tools/call create_session: %d %+v", status, r)
			}
			var res struct {
				IsError bool `json:"isError"`
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				StructuredContent struct {
					SessionID string `json:"session_id"`
				} `json:"structuredContent"`
			}
			json.Unmarshal(r.Result, &res)
			if res.IsError || len(res.Content) == 0 || res.Content[0].Type != "text" || res.StructuredContent.SessionID == "" ||
				!strings.Contains(res.Content[0].Text, res.StructuredContent.SessionID) {
				t.Fatalf("create_session: %s", r.Result)
			}
			status, r, _ = f.post(t, hdr, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`)
			if r == nil || r.Error == nil || r.Error.Code != -32602 {
				t.Errorf("an unknown tool: %d %+v, want JSON-RPC error -32602", status, r)
			}

			if rev >= "2025-06-18" {
				bad := map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01"}
				if status, _, _ := f.post(t, bad, `{"jsonrpc":"2.0","id":5,"method":"ping"}`); status != http.StatusBadRequest {
					t.Errorf("an unsupported MCP-Protocol-Version header: %d, want 400", status)
				}
			}
			if status, _, _ := f.post(t, map[string]string{"Mcp-Session-Id": "no-such-session"}, `{"jsonrpc":"2.0","id":6,"method":"ping"}`); status != http.StatusNotFound {
				t.Errorf("an unknown Mcp-Session-Id: %d, want 404", status)
			}

			req, _ := http.NewRequest(http.MethodDelete, f.url+"/mcp", nil)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				t.Errorf("DELETE of the session: %d", resp.StatusCode)
			}
			if status, _, _ := f.post(t, hdr, `{"jsonrpc":"2.0","id":7,"method":"ping"}`); status != http.StatusNotFound {
				t.Errorf("a request on the deleted session: %d, want 404", status)
			}
		})
	}
}

// TestSpecRevision20241105 speaks the HTTP+SSE transport of 2024-11-05 by
// hand: GET /sse names an endpoint, requests are POSTed there, and the
// replies come back as events on the stream.
func TestSpecRevision20241105(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	resp, err := http.Get(f.url + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("GET /sse: Content-Type %q", ct)
	}
	events := make(chan [2]string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				events <- [2]string{name, v}
			}
		}
		close(events)
	}()
	next := func() [2]string {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the SSE stream ended")
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event on the SSE stream in 10 s")
		}
		return [2]string{}
	}
	ev := next()
	if ev[0] != "endpoint" {
		t.Fatalf("first event %q, want endpoint", ev[0])
	}
	endpoint := f.url + ev[1]
	send := func(body string) {
		t.Helper()
		resp, err := http.Post(endpoint, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %d, want 202", body, resp.StatusCode)
		}
	}
	reply := func() rpcReply {
		t.Helper()
		ev := next()
		var r rpcReply
		if ev[0] != "message" || json.Unmarshal([]byte(ev[1]), &r) != nil || r.Error != nil {
			t.Fatalf("reply event %q: %s", ev[0], ev[1])
		}
		return r
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"by-hand","version":"1"}}}`)
	if r := reply(); !strings.Contains(string(r.Result), `"protocolVersion":"2024-11-05"`) {
		t.Fatalf("initialize answered %s, want revision 2024-11-05", r.Result)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_session","arguments":{}}}`)
	if r := reply(); r.ID != 2 || !strings.Contains(string(r.Result), `"session_id"`) || strings.Contains(string(r.Result), `"isError":true`) {
		t.Fatalf("create_session over SSE: %s", r.Result)
	}
}
