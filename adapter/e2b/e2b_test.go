package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/e2b"
	"github.com/mcpbox/mcpbox/apikey"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

type fixture struct {
	t   *testing.T
	url string
	st  *sqlite.Store
	h   *e2b.Handler
	mgr *manager.Manager
}

// newFixture serves the E2B handler, wrapped around a handler that
// answers "mcp" for anything else, on a fake runtime running the real
// agent in this process.
func newFixture(t *testing.T, pools ...manager.PoolSpec) *fixture {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(context.Background(), &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: st,
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }, Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go m.Run(ctx)
	t.Cleanup(func() { cancel(); m.StopAll(context.Background()); m.Close(context.Background()) })
	secret, err := e2b.LoadSecret(filepath.Join(t.TempDir(), "secret"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := e2b.New(e2b.Options{Manager: m, Keys: st, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	other := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "mcp") })
	srv := httptest.NewServer(h.Wrap(other))
	t.Cleanup(srv.Close)
	return &fixture{t: t, url: srv.URL, st: st, h: h, mgr: m}
}

func (f *fixture) key(owner string) string {
	secret, k, hash, err := apikey.Generate(owner, "")
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.st.PutKey(context.Background(), k, hash); err != nil {
		f.t.Fatal(err)
	}
	return secret
}

// call sends a control-plane request and decodes a JSON answer into out.
func (f *fixture) call(method, path, key string, body any, out any) (int, http.Header) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, f.url+path, rd)
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, resp.Header
}

type sandbox struct {
	SandboxID, TemplateID, EnvdVersion, EnvdAccessToken, TrafficAccessToken string
}

type info struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
}

type apiErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (f *fixture) create(key string, body map[string]any) sandbox {
	f.t.Helper()
	var sb sandbox
	if code, _ := f.call("POST", "/v2/sandboxes", key, body, &sb); code != http.StatusCreated || sb.SandboxID == "" {
		f.t.Fatalf("create: %d %+v", code, sb)
	}
	return sb
}

func TestControlPlane(t *testing.T) {
	f := newFixture(t)
	key := f.key("team-a")
	sb := f.create(key, map[string]any{"templateID": "code-interpreter-v1", "timeout": 120, "metadata": map[string]string{"k": "v"}, "envVars": map[string]string{"A": "b"}})
	if sb.TemplateID != "code-interpreter-v1" || sb.EnvdVersion < "0.6.4" || sb.EnvdAccessToken == "" || sb.TrafficAccessToken != sb.EnvdAccessToken {
		t.Errorf("create answered %+v", sb)
	}

	var got info
	if code, _ := f.call("GET", "/sandboxes/"+sb.SandboxID, key, nil, &got); code != 200 || got.State != "running" ||
		got.TemplateID != "code-interpreter-v1" || len(got.Metadata) != 1 || got.Metadata["k"] != "v" {
		t.Errorf("get: %d %+v (the template alias is kept, and not shown in the metadata)", code, got)
	}
	if life := got.EndAt.Sub(got.StartedAt); life < 119*time.Second || life > 121*time.Second {
		t.Errorf("timeout 120 s gave a life of %v", life)
	}

	t.Run("default timeout is 300 s, and a larger one is capped by the maximum TTL", func(t *testing.T) {
		for _, c := range []struct {
			body map[string]any
			want time.Duration
		}{{map[string]any{}, 300 * time.Second}, {map[string]any{"timeout": 10 * 86400}, f.mgr.MaxTTL()}} {
			s := f.create(key, c.body)
			var i info
			f.call("GET", "/sandboxes/"+s.SandboxID, key, nil, &i)
			if life := i.EndAt.Sub(i.StartedAt); life < c.want-time.Second || life > c.want+time.Second {
				t.Errorf("create %v: life %v, want %v", c.body, life, c.want)
			}
			f.call("DELETE", "/sandboxes/"+s.SandboxID, key, nil, nil)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		if code, _ := f.call("POST", "/sandboxes/"+sb.SandboxID+"/timeout", key, map[string]any{"timeout": 600}, nil); code != http.StatusNoContent {
			t.Fatalf("timeout: %d", code)
		}
		var i info
		f.call("GET", "/sandboxes/"+sb.SandboxID, key, nil, &i)
		if left := time.Until(i.EndAt); left < 590*time.Second || left > 610*time.Second {
			t.Errorf("%v left after a timeout of 600 s", left)
		}
		var e apiErr
		if code, _ := f.call("POST", "/sandboxes/"+sb.SandboxID+"/timeout", key, map[string]any{"timeout": -1}, &e); code != 400 || e.Code != 400 {
			t.Errorf("negative timeout: %d %+v", code, e)
		}
	})

	t.Run("connect: 200 when running, and no timeout never shortens it", func(t *testing.T) {
		var before, after info
		f.call("GET", "/sandboxes/"+sb.SandboxID, key, nil, &before)
		var c sandbox
		if code, _ := f.call("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", key, map[string]any{"timeout": 5}, &c); code != 200 || c.EnvdAccessToken != sb.EnvdAccessToken {
			t.Errorf("connect: %d %+v", code, c)
		}
		f.call("GET", "/sandboxes/"+sb.SandboxID, key, nil, &after)
		if after.EndAt.Before(before.EndAt) {
			t.Errorf("connect with a shorter timeout moved the end from %v to %v", before.EndAt, after.EndAt)
		}
	})

	t.Run("list: filters and pages", func(t *testing.T) {
		more := []string{f.create(key, map[string]any{"metadata": map[string]string{"k": "v"}}).SandboxID,
			f.create(key, map[string]any{"metadata": map[string]string{"k": "v"}}).SandboxID}
		seen := map[string]bool{}
		token := ""
		for pages := 0; ; pages++ {
			var page []info
			path := "/v2/sandboxes?limit=2&metadata=k%3Dv"
			if token != "" {
				path += "&nextToken=" + token
			}
			code, hdr := f.call("GET", path, key, nil, &page)
			if code != 200 || len(page) > 2 {
				t.Fatalf("list: %d %+v", code, page)
			}
			for _, p := range page {
				if seen[p.SandboxID] {
					t.Errorf("%s listed twice", p.SandboxID)
				}
				seen[p.SandboxID] = true
			}
			if token = hdr.Get("X-Next-Token"); token == "" {
				break
			}
			if pages > 3 {
				t.Fatal("paging does not end")
			}
		}
		if len(seen) != 3 || !seen[sb.SandboxID] || !seen[more[0]] || !seen[more[1]] {
			t.Errorf("pages held %v", seen)
		}
		var page []info
		f.call("GET", "/v2/sandboxes?template=code-interpreter-v1", key, nil, &page)
		if len(page) != 1 || page[0].SandboxID != sb.SandboxID {
			t.Errorf("template filter: %+v", page)
		}
		f.call("GET", "/v2/sandboxes?state=paused", key, nil, &page)
		if len(page) != 0 {
			t.Errorf("state=paused: %+v", page)
		}
		var e apiErr
		if code, _ := f.call("GET", "/v2/sandboxes?state=sleeping", key, nil, &e); code != 400 || !strings.Contains(e.Message, "sleeping") {
			t.Errorf("bad state: %d %+v", code, e)
		}
		if code, _ := f.call("GET", "/v2/sandboxes?nextToken=%25%25", key, nil, &e); code != 400 {
			t.Errorf("bad token: %d %+v", code, e)
		}
	})

	t.Run("kill, then it is not found (code 404 in the body)", func(t *testing.T) {
		if code, _ := f.call("DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil); code != http.StatusNoContent {
			t.Fatalf("kill: %d", code)
		}
		for _, c := range []struct{ method, path string }{
			{"DELETE", "/sandboxes/" + sb.SandboxID}, {"GET", "/sandboxes/" + sb.SandboxID},
			{"POST", "/sandboxes/" + sb.SandboxID + "/connect"}, {"GET", "/sandboxes/nosuchsandbox"}, {"GET", "/sandboxes/NOT..valid"},
		} {
			var e apiErr
			if code, hdr := f.call(c.method, c.path, key, nil, &e); code != 404 || e.Code != 404 || hdr.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: %d %+v", c.method, c.path, code, e)
			}
		}
	})

	t.Run("refused options say why", func(t *testing.T) {
		for field, body := range map[string]map[string]any{
			"template":     {"templateID": "nope"},
			"mcp":          {"mcp": map[string]any{"x": 1}},
			"volumeMounts": {"volumeMounts": []any{map[string]any{"name": "v", "path": "/v"}}},
			"autoPause":    {"autoPause": true},
			"network":      {"allow_internet_access": true},
		} {
			var e apiErr
			code, _ := f.call("POST", "/v2/sandboxes", key, body, &e)
			if code < 400 || code >= 500 || e.Message == "" {
				t.Errorf("%s: %d %+v", field, code, e)
			}
		}
		var e apiErr
		if code, _ := f.call("POST", "/v2/sandboxes", key, "not an object", &e); code != 400 {
			t.Errorf("bad body: %d %+v", code, e)
		}
	})
}

func TestAuthAndOwners(t *testing.T) {
	f := newFixture(t)
	// Without keys every caller is the local owner, whatever it sends.
	local := f.create("e2b_anything", nil)
	a, b := f.key("team-a"), f.key("team-b")
	time.Sleep(1100 * time.Millisecond) // keys are looked up once a second

	var e apiErr
	for _, k := range []string{"", "e2b_0000", "mcpbox_x"} {
		if code, _ := f.call("GET", "/v2/sandboxes", k, nil, &e); code != 401 || e.Code != 401 {
			t.Errorf("key %q: %d %+v", k, code, e)
		}
	}
	if code, _ := f.call("GET", "/sandboxes/"+local.SandboxID, a, nil, &e); code != 404 {
		t.Errorf("team-a sees the local owner's sandbox: %d", code)
	}
	mine := f.create(a, nil)
	var list []info
	f.call("GET", "/v2/sandboxes", b, nil, &list)
	if len(list) != 0 {
		t.Errorf("team-b lists %+v", list)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + mine.SandboxID}, {"DELETE", "/sandboxes/" + mine.SandboxID},
		{"POST", "/sandboxes/" + mine.SandboxID + "/connect"}, {"POST", "/sandboxes/" + mine.SandboxID + "/timeout"},
		{"POST", "/sandboxes/" + mine.SandboxID + "/pause"},
	} {
		if code, _ := f.call(c.method, c.path, b, map[string]any{"timeout": 10}, &e); code != 404 {
			t.Errorf("team-b %s %s: %d %+v", c.method, c.path, code, e)
		}
	}
	if code, _ := f.call("GET", "/sandboxes/"+mine.SandboxID, a, nil, nil); code != 200 {
		t.Errorf("team-a lost its sandbox: %d", code)
	}

	// A browser page on another site, or reached by DNS rebinding.
	req, _ := http.NewRequest("GET", f.url+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", a)
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("foreign Origin: %v %v", resp, err)
	}
	req, _ = http.NewRequest("GET", f.url+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", a)
	req.Host = "rebound.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("foreign Host on loopback: %v %v", resp, err)
	}
}

// data sends a data-plane request.
func (f *fixture) data(method, path string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

func TestDataPlane(t *testing.T) {
	f := newFixture(t)
	a, b := f.key("team-a"), f.key("team-b")
	time.Sleep(1100 * time.Millisecond)
	mine, theirs := f.create(a, nil), f.create(b, nil)
	routed := func(id, token string) map[string]string {
		h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}
		if token != "" {
			h["X-Access-Token"] = token
		}
		return h
	}

	for name, c := range map[string]struct {
		hdr  map[string]string
		want int
	}{
		"own token":                  {routed(mine.SandboxID, mine.EnvdAccessToken), 204},
		"traffic token":              {map[string]string{"E2b-Sandbox-Id": mine.SandboxID, "E2b-Traffic-Access-Token": mine.TrafficAccessToken}, 204},
		"no token":                   {routed(mine.SandboxID, ""), 401},
		"another owner's token":      {routed(mine.SandboxID, theirs.EnvdAccessToken), 401},
		"own token, other's sandbox": {routed(theirs.SandboxID, mine.EnvdAccessToken), 401},
		"forged token":               {routed(mine.SandboxID, "dGVhbS1h.AAAA"), 401},
		"API key instead":            {map[string]string{"E2b-Sandbox-Id": mine.SandboxID, "X-Api-Key": a}, 401},
		"host routing":               {map[string]string{"Host": "49983-" + mine.SandboxID + ".sandbox.example", "X-Access-Token": mine.EnvdAccessToken}, 204},
		"host routing, bad token":    {map[string]string{"Host": "49983-" + mine.SandboxID + ".sandbox.example", "X-Access-Token": theirs.EnvdAccessToken}, 401},
		"a port not served":          {map[string]string{"E2b-Sandbox-Id": mine.SandboxID, "E2b-Sandbox-Port": "8080", "X-Access-Token": mine.EnvdAccessToken}, 502},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := f.data("GET", "/health", c.hdr, nil)
			if resp.StatusCode != c.want {
				t.Errorf("GET /health: %d %s, want %d", resp.StatusCode, body, c.want)
			}
		})
	}

	t.Run("without the header, other routes are not the sandbox's", func(t *testing.T) {
		if _, body := f.data("GET", "/health", nil, nil); string(body) != "mcp" {
			t.Errorf("GET /health without E2B headers reached %q", body)
		}
	})

	t.Run("Connect RPC and files pass unchanged", func(t *testing.T) {
		hdr := routed(mine.SandboxID, mine.EnvdAccessToken)
		resp, body := f.data("POST", "/files?path=/workspace/a.txt", map[string]string{"E2b-Sandbox-Id": mine.SandboxID,
			"X-Access-Token": mine.EnvdAccessToken, "Content-Type": "application/octet-stream"}, []byte("hello"))
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"a.txt"`) {
			t.Fatalf("upload: %d %s", resp.StatusCode, body)
		}
		hdr["Content-Type"], hdr["Connect-Protocol-Version"] = "application/json", "1"
		resp, body = f.data("POST", "/filesystem.Filesystem/Stat", hdr, []byte(`{"path":"/workspace/a.txt"}`))
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"size":"5"`) {
			t.Errorf("Stat: %d %s", resp.StatusCode, body)
		}
		resp, body = f.data("POST", "/filesystem.Filesystem/Stat", hdr, []byte(`{"path":"/workspace/nope"}`))
		if resp.StatusCode != 404 || !strings.Contains(string(body), `"not_found"`) {
			t.Errorf("Stat of a missing file: %d %s", resp.StatusCode, body)
		}
		if resp.Header.Get("X-Access-Token") != "" {
			t.Error("a credential header came back")
		}
	})

	t.Run("only Basic user names reach the agent", func(t *testing.T) {
		req := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo hi"]}}`)
		env := make([]byte, 5, 5+len(req))
		binary.BigEndian.PutUint32(env[1:], uint32(len(req)))
		hdr := routed(mine.SandboxID, mine.EnvdAccessToken)
		hdr["Content-Type"], hdr["Connect-Protocol-Version"] = "application/connect+json", "1"
		hdr["Authorization"] = "Bearer " + a
		resp, body := f.data("POST", "/process.Process/Start", hdr, append(env, req...))
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"start"`) || strings.Contains(string(body), "error") {
			t.Errorf("Start with a bearer key: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("a stream's first event arrives at once", func(t *testing.T) {
		req := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","sleep 3; echo done"]},"stdin":false}`)
		env := make([]byte, 5, 5+len(req))
		binary.BigEndian.PutUint32(env[1:], uint32(len(req)))
		hreq, _ := http.NewRequest("POST", f.url+"/process.Process/Start", bytes.NewReader(append(env, req...)))
		for k, v := range routed(mine.SandboxID, mine.EnvdAccessToken) {
			hreq.Header.Set(k, v)
		}
		hreq.Header.Set("Content-Type", "application/connect+json")
		hreq.Header.Set("Connect-Protocol-Version", "1")
		start := time.Now()
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		var head [5]byte
		if _, err := io.ReadFull(br, head[:]); err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		io.ReadFull(br, msg)
		if el := time.Since(start); !strings.Contains(string(msg), `"start"`) || el > 2*time.Second {
			t.Errorf("first message %s after %v: it must come before the command ends", msg, el)
		}
		rest, _ := io.ReadAll(br)
		if !strings.Contains(string(rest), `"end"`) {
			t.Errorf("the stream ended without the end event: %q", rest)
		}
	})

	t.Run("/execute answers its headers before the cell ends, then whole NDJSON lines", func(t *testing.T) {
		hreq, _ := http.NewRequest("POST", f.url+"/execute", strings.NewReader(`{"code":"import time\nprint('a')\ntime.sleep(3)\n1+1"}`))
		hreq.Header.Set("E2b-Sandbox-Id", mine.SandboxID)
		hreq.Header.Set("E2b-Sandbox-Port", "49999")
		hreq.Header.Set("X-Access-Token", mine.EnvdAccessToken)
		hreq.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if el := time.Since(start); resp.StatusCode != 200 || el > 2*time.Second {
			t.Errorf("headers: %d after %v; they must come before the 3 s cell ends", resp.StatusCode, el)
		}
		sc := bufio.NewScanner(resp.Body)
		var types []string
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
			}
			types = append(types, fmt.Sprint(ev["type"]))
		}
		if len(types) == 0 || types[len(types)-1] != "end_of_execution" || !slices.Contains(types, "result") {
			t.Errorf("NDJSON events %v", types)
		}
	})

	t.Run("a killed sandbox is 502", func(t *testing.T) {
		f.call("DELETE", "/sandboxes/"+mine.SandboxID, a, nil, nil)
		resp, body := f.data("GET", "/health", routed(mine.SandboxID, mine.EnvdAccessToken), nil)
		if resp.StatusCode != 502 {
			t.Errorf("GET /health of a killed sandbox: %d %s", resp.StatusCode, body)
		}
	})
}

// A sandbox's envVars are its agent's own environment, which raw envd
// traffic sees: a warm pool sandbox, started without them, is not used.
func TestEnvVarsSkipThePool(t *testing.T) {
	f := newFixture(t, manager.PoolSpec{Flavor: "small", Size: 1})
	for i := 0; f.mgr.PoolStats()["/small"] != 1; i++ {
		if i == 200 {
			t.Fatal("the pool did not fill")
		}
		time.Sleep(50 * time.Millisecond)
	}
	envs := func(sb sandbox) string {
		resp, body := f.data("GET", "/envs", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": sb.EnvdAccessToken}, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /envs: %d %s", resp.StatusCode, body)
		}
		return string(body)
	}
	// The pool refills soon after a take, so its count would not tell;
	// a claimed pool sandbox keeps its id.
	pooled, err := f.st.ListSessions(context.Background(), mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionPooled}})
	if err != nil || len(pooled) != 1 {
		t.Fatalf("pooled sessions: %d, %v", len(pooled), err)
	}
	warm := pooled[0].ID
	with := f.create("", map[string]any{"envVars": map[string]string{"GREETING": "hello"}})
	if got := envs(with); !strings.Contains(got, `"GREETING":"hello"`) {
		t.Errorf("the sandbox's env is %s, without the envVars it was created with", got)
	}
	if with.SandboxID == warm {
		t.Error("a sandbox with envVars took the warm one")
	}
	without := f.create("", nil)
	if without.SandboxID != warm {
		t.Error("a sandbox without envVars did not take the warm one")
	}
	if got := envs(without); strings.Contains(got, "GREETING") {
		t.Errorf("env leaked: %s", got)
	}
}

func TestPauseUnsupported(t *testing.T) {
	f := newFixture(t)
	sb := f.create("", nil)
	var e apiErr
	if code, _ := f.call("POST", "/sandboxes/"+sb.SandboxID+"/pause", "", nil, &e); code != 400 || !strings.Contains(e.Message, "cannot pause") {
		t.Errorf("pause on a runtime without a freezer: %d %+v", code, e)
	}
}

func TestAccessToken(t *testing.T) {
	f := newFixture(t)
	tok := f.h.AccessToken("team-a", "abc")
	if tok == f.h.AccessToken("team-a", "abd") || tok == f.h.AccessToken("team-b", "abc") {
		t.Error("tokens do not bind the owner and the sandbox")
	}
	other, _ := e2b.New(e2b.Options{Manager: f.mgr, Secret: bytes.Repeat([]byte{1}, 32)})
	if other.AccessToken("team-a", "abc") == tok {
		t.Error("the token does not depend on the secret")
	}
	if _, err := e2b.New(e2b.Options{Manager: f.mgr, Secret: []byte("short")}); err == nil {
		t.Error("a short secret was accepted")
	}
}

func TestLoadSecret(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	a, err := e2b.LoadSecret(p)
	if err != nil || len(a) != 32 {
		t.Fatalf("%x %v", a, err)
	}
	b, err := e2b.LoadSecret(p)
	if err != nil || !bytes.Equal(a, b) {
		t.Errorf("a second load gave %x %v", b, err)
	}
}
