package httpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox/adapter/httpserver"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

// hostedFixture serves the test MCP server of package hosted as "py".
func hostedFixture(t *testing.T) *fixture {
	t.Helper()
	src, err := os.ReadFile("../../hosted/testdata/server.py")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(context.Background(), &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: st,
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.StopAll(context.Background()) })
	hs, err := hosted.New(&hosted.Options{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hs.Close)
	if err := hs.Add(hosted.Server{Name: "py", Command: `exec python3 -c "$SRC"`, Env: map[string]string{"SRC": string(src), "SECRET": "x"}}); err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Options{Manager: m, Hosted: hs})
	if err != nil {
		t.Fatal(err)
	}
	h := httpserver.New(httpserver.Options{MCP: srv, Manager: m, Keys: st, Hosted: hs})
	return &fixture{url: serve(t, h), st: st, h: h}
}

func request(t *testing.T, method, url, key, accept, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHostedREST(t *testing.T) {
	f := hostedFixture(t)
	alice, _ := f.key(t, "alice")
	bob, _ := f.key(t, "bob")

	if code, _ := request(t, "GET", f.url+"/v1/servers", "", "", ""); code != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", code)
	}
	code, body := request(t, "GET", f.url+"/v1/servers", alice, "", "")
	if code != 200 || !strings.Contains(body, `"name":"py"`) || !strings.Contains(body, `"SECRET"`) || strings.Contains(body, "def main") {
		t.Errorf("servers: %d %s", code, body)
	}
	code, body = request(t, "GET", f.url+"/v1/servers/py/tools", alice, "", "")
	if code != 200 || !strings.Contains(body, `"name":"slow"`) || !strings.Contains(body, `"input_schema"`) {
		t.Errorf("tools: %d %.300s", code, body)
	}
	if code, _ := request(t, "GET", f.url+"/v1/servers/nope/tools", alice, "", ""); code != 404 {
		t.Errorf("unknown server: %d, want 404", code)
	}
	// Owners: alice's and bob's calls reach instances of their own.
	for _, c := range []struct{ key, want string }{{alice, "1"}, {alice, "2"}, {bob, "1"}} {
		code, body := request(t, "POST", f.url+"/v1/servers/py/tools/count", c.key, "", "{}")
		var res struct {
			Content []struct{ Text string } `json:"content"`
		}
		json.Unmarshal([]byte(body), &res)
		if code != 200 || len(res.Content) != 1 || res.Content[0].Text != c.want {
			t.Errorf("count: %d %s, want %s", code, body, c.want)
		}
	}
	if code, body := request(t, "POST", f.url+"/v1/servers/py/tools/echo", alice, "", "[1,2]"); code != 400 {
		t.Errorf("array arguments: %d %s, want 400", code, body)
	}
	if code, body := request(t, "POST", f.url+"/v1/servers/py/tools/echo", alice, "", "{not json"); code != 400 {
		t.Errorf("bad JSON: %d %s, want 400", code, body)
	}
	// Streamed: progress lines, then the result.
	code, body = request(t, "POST", f.url+"/v1/servers/py/tools/slow", alice, "application/x-ndjson", `{"steps": 3}`)
	sc := bufio.NewScanner(strings.NewReader(body))
	var progress, results int
	for sc.Scan() {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if line["progress"] != nil {
			progress++
		}
		if line["result"] != nil && strings.Contains(string(line["result"]), "done 3") {
			results++
		}
	}
	if code != 200 || progress < 3 || results != 1 {
		t.Errorf("streamed call: %d, %d progress lines, %d results:\n%s", code, progress, results, body)
	}
	// Quick: a server from a command, for one call.
	src, _ := os.ReadFile("../../hosted/testdata/server.py")
	q, _ := json.Marshal(map[string]any{"command": `exec python3 -c "$SRC"`, "env": map[string]string{"SRC": string(src), "V": "quick"}, "tool": "env", "arguments": map[string]any{"name": "V"}})
	code, body = request(t, "POST", f.url+"/v1/quick", bob, "", string(q))
	if code != 200 || !strings.Contains(body, `"text":"quick"`) {
		t.Errorf("quick: %d %s", code, body)
	}
}
