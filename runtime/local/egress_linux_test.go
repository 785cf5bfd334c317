package local_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/egress"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// testDNS maps the tests' names to loopback: nothing outside is looked up.
type testDNS struct{}

func (testDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch host {
	case "api.test", "other.test", "pypi.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// policies is the tests' policy store, as the manager's would be.
type policies struct {
	mu sync.Mutex
	m  map[string]*mcpbox.NetworkPolicy
}

func (p *policies) get(_ context.Context, id string) (*mcpbox.NetworkPolicy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id], nil
}

func (p *policies) set(id string, np *mcpbox.NetworkPolicy) {
	p.mu.Lock()
	p.m[id] = np
	p.mu.Unlock()
}

func newEgressRuntime(t testing.TB, home string, pols *policies, o *egress.Options) (*local.Runtime, *egress.Proxy) {
	t.Helper()
	testutil.RequireRoot(t)
	if o == nil {
		o = &egress.Options{}
	}
	o.Policy, o.Resolver = pols.get, testDNS{}
	p, err := egress.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rt, err := local.New(&local.Options{Home: home, Egress: p})
	if err != nil {
		t.Fatal(err)
	}
	return rt, p
}

func newNetSandbox(t testing.TB, rt *local.Runtime, pols *policies, np *mcpbox.NetworkPolicy) (string, *agentclient.Client) {
	t.Helper()
	return newNetSandboxOf(t, rt, pols, np, tiny)
}

func newNetSandboxOf(t testing.TB, rt *local.Runtime, pols *policies, np *mcpbox.NetworkPolicy, fl mcpbox.Flavor) (string, *agentclient.Client) {
	t.Helper()
	id := testutil.ID()
	pols.set(id, np)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: fl, Network: np})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	c := agentclient.ForSandbox(rt, sb.ID)
	t.Cleanup(func() {
		c.Close()
		if err := rt.Destroy(context.Background(), sb.ID); err != nil {
			t.Errorf("destroy: %v", err)
		}
		assertGone(t, rt, sb)
	})
	return id, c
}

func shOut(t testing.TB, c *agentclient.Client, script string) string {
	t.Helper()
	out, errb, _ := run(t, c, 30*time.Second, "sh", "-c", script)
	return strings.TrimSpace(out + errb)
}

// TestEgressThroughSandbox runs real clients inside a real sandbox: the
// agent's relay, the socket handed in at start, and the host's proxy.
func TestEgressThroughSandbox(t *testing.T) {
	pols := &policies{m: map[string]*mcpbox.NetworkPolicy{}}
	home := testutil.Home(t)
	rt, p := newEgressRuntime(t, home, pols, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/leftpad" { // an npm registry's package document
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"name":"leftpad","dist-tags":{"latest":"1.2.3"},"versions":{"1.2.3":{"name":"leftpad","version":"1.2.3"}}}`)
			return
		}
		fmt.Fprintf(w, "secure %s", r.Host)
	}))
	defer tlsSrv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	tport := tlsSrv.URL[strings.LastIndexByte(tlsSrv.URL, ':')+1:]
	allow := &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + port, "api.test:" + tport, "127.0.0.1"}}

	t.Run("none", func(t *testing.T) {
		_, c := newNetSandbox(t, rt, pols, nil)
		out := shOut(t, c, "curl -sS --max-time 5 http://api.test:"+port+"/")
		if !strings.Contains(out, "no network access (its network policy is none)") {
			t.Errorf("through the proxy: %q", out)
		}
		// Directly: the sandbox has nothing but lo, and the host's
		// loopback is not its own.
		out = shOut(t, c, "curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:"+port+"/; curl -sS --max-time 5 --noproxy '*' http://10.1.2.3/")
		if strings.Contains(out, "hello") || !strings.Contains(out, "Couldn't connect") {
			t.Errorf("directly: %q", out)
		}
		out = shOut(t, c, `python3 -c "
import socket
try:
    socket.create_connection(('10.1.2.3', 80), timeout=5)
except OSError as e:
    print(e)"`)
		if !strings.Contains(out, "unreachable") {
			t.Errorf("a direct connection from python: %q", out)
		}
	})

	t.Run("allow-list", func(t *testing.T) {
		id, c := newNetSandbox(t, rt, pols, allow)
		env := shOut(t, c, "echo $HTTP_PROXY $https_proxy $NO_PROXY")
		if env != "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1" {
			t.Fatalf("proxy environment: %q", env)
		}
		if out := shOut(t, c, "curl -sS --max-time 10 http://api.test:"+port+"/"); out != "hello api.test:"+port {
			t.Errorf("curl http: %q", out)
		}
		if out := shOut(t, c, "curl -sSk --max-time 10 https://api.test:"+tport+"/"); out != "secure api.test:"+tport {
			t.Errorf("curl https: %q", out)
		}
		py := `python3 -c "
import ssl, sys, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    print(urllib.request.urlopen(sys.argv[1], context=ctx, timeout=10).read().decode())
except Exception as e:
    print('ERROR', e)" `
		if out := shOut(t, c, py+"https://api.test:"+tport+"/"); out != "secure api.test:"+tport {
			t.Errorf("python urllib https: %q", out)
		}
		if out := shOut(t, c, py+"https://other.test:"+tport+"/"); !strings.Contains(out, "403 Forbidden by mcpbox network policy") {
			t.Errorf("python urllib to another host: %q", out)
		}
		// npm reads HTTPS_PROXY itself and tunnels with CONNECT.
		if out := shOut(t, c, "npm view leftpad version --registry https://api.test:"+tport+"/ --strict-ssl=false --no-update-notifier --cache /tmp/npm 2>&1"); out != "1.2.3" {
			t.Errorf("npm through the proxy: %q", out)
		}
		if out := shOut(t, c, "curl -sS --max-time 10 http://other.test:"+port+"/"); !strings.Contains(out, "other.test:"+port+" is not on the allow-list") {
			t.Errorf("curl to another host: %q", out)
		}
		if st := p.Stats(id); st.Connections < 6 || st.BytesIn == 0 || st.RefusedHosts["other.test"] != 2 {
			t.Errorf("counters: %+v", st)
		}

		// A change applies to the next connection.
		pols.set(id, &mcpbox.NetworkPolicy{Allow: []string{"other.test:" + port, "127.0.0.1"}})
		if out := shOut(t, c, "curl -sS --max-time 10 http://api.test:"+port+"/"); !strings.Contains(out, "not on the allow-list") {
			t.Errorf("after the change, api.test: %q", out)
		}
		if out := shOut(t, c, "curl -sS --max-time 10 http://other.test:"+port+"/"); out != "hello other.test:"+port {
			t.Errorf("after the change, other.test: %q", out)
		}
	})

	t.Run("takeover", func(t *testing.T) {
		id, c := newNetSandbox(t, rt, pols, allow)
		// The process serving the sandbox's proxy goes away...
		p.Forget(id)
		if out := shOut(t, c, "curl -sS --max-time 10 http://api.test:"+port+"/"); !strings.Contains(out, "egress proxy cannot be reached") {
			t.Errorf("with nobody serving: %q", out)
		}
		// ...and another, on the same home, adopts the sandbox.
		rt2, p2 := newEgressRuntime(t, home, pols, nil)
		if err := rt2.Adopt(id); err != nil {
			t.Fatal(err)
		}
		if out := shOut(t, c, "curl -sS --max-time 10 http://api.test:"+port+"/"); out != "hello api.test:"+port {
			t.Errorf("after the takeover: %q", out)
		}
		if p2.Stats(id).Connections == 0 {
			t.Error("the adopting process's proxy saw nothing")
		}
	})

	t.Run("connection limit", func(t *testing.T) {
		pols2 := &policies{m: map[string]*mcpbox.NetworkPolicy{}}
		rt3, _ := newEgressRuntime(t, home, pols2, &egress.Options{MaxConnsPerSession: 20})
		_, greedy := newNetSandbox(t, rt3, pols2, allow)
		_, other := newNetSandbox(t, rt3, pols2, allow)
		// 200 connections held open: 20 are served, the rest refused.
		out := shOut(t, greedy, `python3 -c "
import select, socket, time
held, codes = [], {}
for i in range(200):
    held.append(socket.create_connection(('127.0.0.1', 3128), timeout=10))
# The refused get their answer at once; the admitted wait for a request.
pending, deadline = set(held), time.time() + 10
while len(pending) > 20 and time.time() < deadline:
    r, _, _ = select.select(list(pending), [], [], 1)
    for s in r:
        line = s.recv(200).split(b'\r\n')[0].decode()
        codes[line[9:12]] = codes.get(line[9:12], 0) + 1
        pending.discard(s)
print(codes)
s = pending.pop(); s.sendall(b'GET http://api.test:`+port+`/ HTTP/1.1\r\nHost: api.test\r\n\r\n')
print(s.recv(200).split(b'\r\n')[0].decode())
"`)
		if !strings.Contains(out, "{'429': 180}") || !strings.Contains(out, "HTTP/1.1 200 OK") {
			t.Errorf("past the limit: %q", out)
		}
		if out := shOut(t, other, "curl -sS --max-time 10 http://api.test:"+port+"/"); out != "hello api.test:"+port {
			t.Errorf("another sandbox: %q", out)
		}
	})
}

func TestNetworkNeedsProxy(t *testing.T) {
	rt := newRuntime(t)
	_, err := rt.Create(context.Background(), mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny,
		Network: &mcpbox.NetworkPolicy{Public: true}})
	if mcpbox.ErrorCode(err) != mcpbox.EUNSUPPORTED || !strings.Contains(err.Error(), "egress proxy") {
		t.Fatalf("a policy without a proxy: %v", err)
	}
}

// wheel is a minimal pure-Python wheel of hello-egress 1.0.
func wheel(t testing.TB) []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	files := []struct{ name, body string }{
		{"hello_egress.py", "X = 42\n"},
		{"hello_egress-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: hello-egress\nVersion: 1.0\n"},
		{"hello_egress-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: mcpbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"hello_egress-1.0.dist-info/RECORD", "hello_egress.py,,\nhello_egress-1.0.dist-info/METADATA,,\nhello_egress-1.0.dist-info/WHEEL,,\nhello_egress-1.0.dist-info/RECORD,,\n"},
	}
	for _, f := range files {
		w, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, f.body)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPipInstallThroughProxy installs a package with pip from an index
// the policy allows, the way a model would, and fails to from another.
func TestPipInstallThroughProxy(t *testing.T) {
	pols := &policies{m: map[string]*mcpbox.NetworkPolicy{}}
	rt, p := newEgressRuntime(t, testutil.Home(t), pols, nil)
	whl := wheel(t)
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/hello-egress/":
			fmt.Fprint(w, `<html><body><a href="/files/hello_egress-1.0-py3-none-any.whl">hello_egress-1.0-py3-none-any.whl</a></body></html>`)
		case "/files/hello_egress-1.0-py3-none-any.whl":
			w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	}))
	defer index.Close()
	port := index.URL[strings.LastIndexByte(index.URL, ':')+1:]
	id, c := newNetSandbox(t, rt, pols, &mcpbox.NetworkPolicy{Allow: []string{"pypi.test:" + port, "127.0.0.1"}})
	pip := "python3 -m pip install --user --break-system-packages --no-cache-dir --disable-pip-version-check --retries 0 --timeout 10 --trusted-host "
	out := shOut(t, c, pip+"pypi.test:"+port+" --index-url http://pypi.test:"+port+"/simple/ hello-egress 2>&1 && python3 -c 'import hello_egress; print(hello_egress.X)'")
	if !strings.Contains(out, "Successfully installed hello-egress-1.0") || !strings.HasSuffix(out, "\n42") {
		t.Fatalf("pip install from an allowed index: %q", out)
	}
	out = shOut(t, c, pip+"other.test:"+port+" --force-reinstall --index-url http://other.test:"+port+"/simple/ hello-egress 2>&1")
	// pip keeps the index's 403 to its debug log; the proxy counted it.
	if !strings.Contains(out, "No matching distribution found for hello-egress") || p.Stats(id).RefusedHosts["other.test"] == 0 {
		t.Fatalf("pip install from another index: %q", out)
	}
}
