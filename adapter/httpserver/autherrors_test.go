package httpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/httpserver"
)

// TestAuthRefusalsShareOneShape checks that every 401 — no key, an
// unknown key, a revoked key, a header that is not Bearer — has the same
// JSON body, with a message saying which of them it was.
func TestAuthRefusalsShareOneShape(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	f.key(t, "alice")
	revoked, revokedKey := f.key(t, "bob")
	if err := f.st.RevokeKey(context.Background(), revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the server rechecks for keys once a second

	for _, tc := range []struct {
		name string
		h    headers
		want string
	}{
		{"no key", headers{}, "requires an API key, and the request carries none"},
		{"unknown key", headers{"Authorization": "Bearer mcpbox_nope"}, "the API key was refused: it is unknown or has been revoked"},
		{"unknown X-API-Key", headers{"X-API-Key": "nope"}, "the API key was refused"},
		{"revoked key", headers{"Authorization": "Bearer " + revoked}, "the API key was refused: it is unknown or has been revoked"},
		{"not bearer", headers{"Authorization": "Basic dXNlcjpwYXNz"}, `must be "Bearer <key>"`},
	} {
		for _, path := range []string{"/mcp", "/sse", "/metrics"} {
			method := http.MethodPost
			if path == "/metrics" {
				method = http.MethodGet
			}
			req, _ := http.NewRequest(method, f.url+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var body map[string]any
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &body) != nil {
				t.Errorf("%s %s: %d %s %q, want a 401 with a JSON body", tc.name, path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
				continue
			}
			var keys []string
			for k := range body {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if want := []string{"category", "context", "error_code", "message", "recovery_suggestions", "severity"}; !slices.Equal(keys, want) {
				t.Errorf("%s %s: body keys %v, want %v", tc.name, path, keys, want)
			}
			if body["error_code"] != mcpbox.EUNAUTH || !strings.Contains(body["message"].(string), tc.want) {
				t.Errorf("%s %s: %s", tc.name, path, b)
			}
		}
	}
}

// TestRefusalsAreJSON: a foreign Origin, a DNS-rebinding Host and a wrong
// method get the same JSON body as every other refusal, not plain text.
func TestRefusalsAreJSON(t *testing.T) {
	f := newFixture(t, httpserver.Options{})
	for _, tc := range []struct {
		name, method, path string
		h                  headers
		host               string
		status             int
		want               string
	}{
		{"foreign origin", http.MethodPost, "/mcp", headers{"Origin": "https://evil.example"}, "", http.StatusForbidden, "Origin https://evil.example may not call this server"},
		{"rebinding host", http.MethodPost, "/mcp", headers{}, "evil.example", http.StatusForbidden, "Host evil.example is not this server"},
		{"sse method", http.MethodPut, "/sse", headers{}, "", http.StatusMethodNotAllowed, "PUT is not allowed on /sse"},
		{"sse unknown stream", http.MethodPost, "/sse?sessionid=nope", headers{}, "", http.StatusNotFound, "no SSE stream with this sessionid"},
	} {
		req, _ := http.NewRequest(tc.method, f.url+tc.path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range tc.h {
			req.Header.Set(k, v)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body map[string]any
		if resp.StatusCode != tc.status || json.Unmarshal(b, &body) != nil || body["severity"] != "error" ||
			!strings.Contains(fmt.Sprint(body["message"]), tc.want) || len(body["recovery_suggestions"].([]any)) == 0 {
			t.Errorf("%s: %d %q", tc.name, resp.StatusCode, b)
		}
	}
}
