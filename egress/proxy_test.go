package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpbox/mcpbox"
)

// fakeDNS maps test names to loopback addresses: no outside address is
// ever looked up.
type fakeDNS map[string][]netip.Addr

func (f fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var loop = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// harness is a proxy serving sessions whose policies the test sets.
type harness struct {
	t        *testing.T
	p        *Proxy
	mu       sync.Mutex
	policies map[string]*mcpbox.NetworkPolicy
	plain    *httptest.Server // http on 127.0.0.1
	tls      *httptest.Server // https on 127.0.0.1
}

func newHarness(t *testing.T, o *Options) *harness {
	t.Helper()
	h := &harness{t: t, policies: map[string]*mcpbox.NetworkPolicy{}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	})
	h.plain = httptest.NewServer(handler)
	h.tls = httptest.NewTLSServer(handler)
	t.Cleanup(h.plain.Close)
	t.Cleanup(h.tls.Close)
	if o == nil {
		o = &Options{}
	}
	o.Policy = func(_ context.Context, id string) (*mcpbox.NetworkPolicy, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.policies[id], nil
	}
	if o.Resolver == nil {
		o.Resolver = fakeDNS{"api.test": loop, "other.test": loop, "a.wild.test": loop, "b.c.wild.test": loop,
			"wild.test": loop, "bad.test": loop, "good.test": loop, "127.0.0.1.nip.io": loop}
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	h.p = p
	return h
}

func (h *harness) port(s *httptest.Server) string { return s.URL[strings.LastIndexByte(s.URL, ':')+1:] }

func (h *harness) setPolicy(id string, p *mcpbox.NetworkPolicy) {
	h.mu.Lock()
	h.policies[id] = p
	h.mu.Unlock()
	h.p.PolicyChanged(id)
}

// tcpSession serves session id on a loopback TCP port, for curl, Python
// and node, which speak to proxies over TCP (the agent's relay does, in
// a sandbox), and returns the proxy URL.
func (h *harness) tcpSession(id string, p *mcpbox.NetworkPolicy) string {
	h.setPolicy(id, p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.p.Serve(id, ln); err != nil {
		h.t.Fatal(err)
	}
	return "http://" + ln.Addr().String()
}

// unixSession serves session id on a Unix socket, as the local runtime
// does, and returns its path.
func (h *harness) unixSession(id string, p *mcpbox.NetworkPolicy) string {
	h.setPolicy(id, p)
	path := filepath.Join(h.t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.p.Serve(id, ln); err != nil {
		h.t.Fatal(err)
	}
	return path
}

// client is an HTTP client whose proxy is the session's socket.
func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func curl(t *testing.T, proxy, u string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (scripts/deps.sh installs it)")
	}
	// --noproxy '' keeps curl from bypassing the proxy for 127.0.0.1.
	out, err := exec.Command("curl", "-sS", "-k", "--max-time", "10", "--noproxy", "", "-x", proxy, "-w", "\n%{http_code} %{http_connect}", u).CombinedOutput()
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		t.Fatalf("curl %s: %v: %s", u, err, s)
	}
	return s[:i], s[i+1:]
}

func python(t *testing.T, proxy, u string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed (scripts/deps.sh installs it)")
	}
	script := `
import ssl, sys, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
op = urllib.request.build_opener(urllib.request.ProxyHandler({"http": sys.argv[1], "https": sys.argv[1]}), urllib.request.HTTPSHandler(context=ctx))
try:
    print(op.open(sys.argv[2], timeout=10).read().decode())
except Exception as e:
    print("ERROR", e)
`
	out, _ := exec.Command("python3", "-c", script, proxy, u).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// npmConnect does what npm's proxy agent does: CONNECT host:port with a
// Host header, then TLS over the tunnel, from node.
func npmConnect(t *testing.T, proxy, hostport string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed (scripts/deps.sh installs it)")
	}
	script := `
const http = require('http'), tls = require('tls');
const [proxy, target] = process.argv.slice(1);
const u = new URL(proxy);
const req = http.request({host: u.hostname, port: u.port, method: 'CONNECT', path: target,
  headers: {host: target, 'proxy-connection': 'keep-alive', 'user-agent': 'npm/10'}});
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log('CONNECT ' + res.statusCode + ' ' + res.statusMessage); process.exit(0); }
  const s = tls.connect({socket, servername: target.split(':')[0], rejectUnauthorized: false}, () => {
    s.write('GET /npm HTTP/1.1\r\nHost: ' + target + '\r\nConnection: close\r\n\r\n');
  });
  let body = ''; s.on('data', d => body += d); s.on('end', () => { console.log(body.split('\r\n\r\n')[1]); });
});
req.on('error', e => console.log('ERROR ' + e.message));
req.end();
`
	out, _ := exec.Command("node", "-e", script, proxy, hostport).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func TestNone(t *testing.T) {
	h := newHarness(t, nil)
	for name, p := range map[string]*mcpbox.NetworkPolicy{"nil": nil, "empty": {}, "deny only": {Deny: []string{"x.test"}}} {
		t.Run(name, func(t *testing.T) {
			proxy := h.tcpSession("none"+strings.ReplaceAll(name, " ", ""), p)
			for _, u := range []string{"http://api.test:" + h.port(h.plain) + "/", "https://api.test:" + h.port(h.tls) + "/", "http://127.0.0.1:" + h.port(h.plain) + "/"} {
				body, codes := curl(t, proxy, u)
				if !strings.HasPrefix(codes, "403") && !strings.HasSuffix(codes, " 403") {
					t.Errorf("%s with policy none: got %q %q, want 403", u, codes, body)
				}
				if strings.HasPrefix(u, "http:") && !strings.Contains(body, "no network access (its network policy is none)") {
					t.Errorf("%s: the refusal does not say why: %q", u, body)
				}
			}
			if out := python(t, proxy, "https://api.test:"+h.port(h.tls)+"/"); !strings.Contains(out, "403") || !strings.Contains(out, "network policy") {
				t.Errorf("python over CONNECT with policy none: %q, want a 403 naming the network policy", out)
			}
		})
	}
}

func TestAllowList(t *testing.T) {
	h := newHarness(t, nil)
	pp, tp := h.port(h.plain), h.port(h.tls)
	pol := &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "API.Test.:" + tp, "127.0.0.1"}}
	proxy := h.tcpSession("s1", pol)

	t.Run("curl http", func(t *testing.T) {
		body, codes := curl(t, proxy, "http://api.test:"+pp+"/x")
		if !strings.HasPrefix(codes, "200") || body != "hello from api.test:"+pp+"/x" {
			t.Fatalf("got %q %q", codes, body)
		}
	})
	t.Run("curl https (CONNECT)", func(t *testing.T) {
		body, codes := curl(t, proxy, "https://api.test:"+tp+"/y")
		if codes != "200 200" || body != "hello from api.test:"+tp+"/y" {
			t.Fatalf("got %q %q", codes, body)
		}
	})
	t.Run("python urllib", func(t *testing.T) {
		if out := python(t, proxy, "http://api.test:"+pp+"/p"); out != "hello from api.test:"+pp+"/p" {
			t.Fatalf("http: %q", out)
		}
		if out := python(t, proxy, "https://api.test:"+tp+"/p"); out != "hello from api.test:"+tp+"/p" {
			t.Fatalf("https: %q", out)
		}
	})
	t.Run("npm-style CONNECT", func(t *testing.T) {
		if out := npmConnect(t, proxy, "api.test:"+tp); out != "hello from api.test:"+tp+"/npm" {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("another host is refused", func(t *testing.T) {
		body, codes := curl(t, proxy, "http://other.test:"+pp+"/")
		if !strings.HasPrefix(codes, "403") || !strings.Contains(body, "other.test:"+pp+" is not on the allow-list of this session's network policy (allow api.test:"+pp) {
			t.Fatalf("got %q %q", codes, body)
		}
		if _, codes := curl(t, proxy, "https://other.test:"+tp+"/"); codes != "000 403" {
			t.Fatalf("CONNECT to another host: %q", codes)
		}
		if out := python(t, proxy, "https://other.test:"+tp+"/"); !strings.Contains(out, "403 Forbidden by mcpbox network policy") {
			t.Fatalf("python: %q", out)
		}
		if out := npmConnect(t, proxy, "other.test:"+tp); !strings.HasPrefix(out, "CONNECT 403") {
			t.Fatalf("node: %q", out)
		}
	})
	t.Run("another port is refused", func(t *testing.T) {
		body, codes := curl(t, proxy, "http://api.test:1/")
		if !strings.HasPrefix(codes, "403") || !strings.Contains(body, "port 1 of api.test is not allowed") {
			t.Fatalf("got %q %q", codes, body)
		}
	})
	t.Run("counters", func(t *testing.T) {
		st := h.p.Stats("s1")
		if st.Connections < 6 || st.BytesIn == 0 || st.BytesOut == 0 || st.Refused < 4 || st.RefusedHosts["other.test"] < 3 {
			t.Fatalf("counters: %+v", st)
		}
	})
}

func TestWildcard(t *testing.T) {
	h := newHarness(t, nil)
	pp := h.port(h.plain)
	c := unixClient(h.unixSession("w", &mcpbox.NetworkPolicy{Allow: []string{"*.wild.test:" + pp, "127.0.0.1"}}))
	for host, want := range map[string]int{"a.wild.test": 200, "b.c.wild.test": 200, "A.WILD.TEST.": 200, "wild.test": 403, "api.test": 403} {
		if code, body := get(t, c, "http://"+host+":"+pp+"/"); code != want {
			t.Errorf("%s: %d %q, want %d", host, code, body, want)
		}
	}
}

func TestDenyBeatsPublic(t *testing.T) {
	h := newHarness(t, nil)
	// The test servers listen on loopback, which public never reaches by
	// itself: naming it by address and port lets good.test through, as a
	// public host would be.
	pp := h.port(h.plain)
	pol := &mcpbox.NetworkPolicy{Public: true, Allow: []string{"127.0.0.1:" + pp, "*.test:" + pp}, Deny: []string{"bad.test", "127.0.0.2"}}
	c := unixClient(h.unixSession("d", pol))
	if code, body := get(t, c, "http://good.test:"+pp+"/"); code != 200 {
		t.Fatalf("good.test: %d %q", code, body)
	}
	code, body := get(t, c, "http://bad.test:"+pp+"/")
	if code != 403 || !strings.Contains(body, `deny-list entry "bad.test"`) {
		t.Fatalf("bad.test: %d %q", code, body)
	}
	if code, body := get(t, c, "http://BAD.test.:"+pp+"/"); code != 403 {
		t.Fatalf("BAD.test.: %d %q", code, body)
	}
	if code, _ := get(t, c, "http://127.0.0.2:"+pp+"/"); code != 403 {
		t.Fatalf("a denied address: %d", code)
	}
}

func TestRebinding(t *testing.T) {
	h := newHarness(t, nil)
	pp := h.port(h.plain)
	// api.test is allowed by name, but resolves to 127.0.0.1.
	c := unixClient(h.unixSession("r", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "*.nip.io:" + pp}}))
	for _, host := range []string{"api.test", "127.0.0.1.nip.io"} {
		code, body := get(t, c, "http://"+host+":"+pp+"/")
		if code != 403 || !strings.Contains(body, "resolves to 127.0.0.1, a loopback address") {
			t.Fatalf("%s: %d %q, want 403 saying it resolves to loopback", host, code, body)
		}
	}
	for _, u := range []string{"http://127.0.0.1:" + pp + "/", "http://[::ffff:127.0.0.1]:" + pp + "/", "http://169.254.169.254/"} {
		if code, body := get(t, c, u); code != 403 {
			t.Fatalf("%s: %d %q, want 403", u, code, body)
		}
	}
	// Public does not reach loopback either.
	h.setPolicy("r", &mcpbox.NetworkPolicy{Public: true, Allow: []string{"api.test:" + pp}})
	if code, _ := get(t, c, "http://api.test:"+pp+"/"); code != 403 {
		t.Fatalf("public: %d", code)
	}
	// Naming loopback lets the name through.
	h.setPolicy("r", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "127.0.0.0/8"}})
	if code, body := get(t, c, "http://api.test:"+pp+"/"); code != 200 {
		t.Fatalf("with loopback named: %d %q", code, body)
	}
}

func TestSpecialAddresses(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1": "loopback", "::1": "loopback", "10.1.2.3": "private",
		"192.168.1.1": "private", "172.20.0.1": "private", "169.254.169.254": "cloud metadata", "fe80::1": "link-local",
		"224.0.0.1": "multicast", "ff02::1": "multicast", "0.0.0.0": "unspecified", "::ffff:10.0.0.1": "private",
		"100.100.100.200": "cloud metadata", "fd00:ec2::254": "cloud metadata", "fc00::1": "private",
		"8.8.8.8": "", "2606:4700::1111": ""} {
		if got := special(netip.MustParseAddr(addr)); got != want {
			t.Errorf("special(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestPolicyChangeOnLiveSession(t *testing.T) {
	h := newHarness(t, nil)
	pp := h.port(h.plain)
	c := unixClient(h.unixSession("live", nil))
	if code, _ := get(t, c, "http://api.test:"+pp+"/"); code != 403 {
		t.Fatalf("before: %d", code)
	}
	h.setPolicy("live", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "127.0.0.1"}})
	if code, body := get(t, c, "http://api.test:"+pp+"/"); code != 200 {
		t.Fatalf("after allowing: %d %q", code, body)
	}
	h.setPolicy("live", &mcpbox.NetworkPolicy{Allow: []string{"other.test:" + pp, "127.0.0.1"}})
	if code, _ := get(t, c, "http://api.test:"+pp+"/"); code != 403 {
		t.Fatalf("after taking it away: %d", code)
	}
}

func TestMalformed(t *testing.T) {
	h := newHarness(t, nil)
	path := h.unixSession("m", &mcpbox.NetworkPolicy{Public: true})
	for name, req := range map[string]string{
		"origin form":   "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"no port":       "CONNECT api.test HTTP/1.1\r\nHost: api.test\r\n\r\n",
		"numeric ipv4":  "GET http://2130706433/ HTTP/1.1\r\nHost: 2130706433\r\n\r\n",
		"hex ipv4":      "CONNECT 0x7f.1:443 HTTP/1.1\r\nHost: 0x7f.1:443\r\n\r\n",
		"bad port":      "CONNECT api.test:99999 HTTP/1.1\r\nHost: api.test:99999\r\n\r\n",
		"zoned address": "CONNECT [fe80::1%25lo]:443 HTTP/1.1\r\nHost: [fe80::1%25lo]:443\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 400 && resp.StatusCode != 403 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
}

// TestConnectionLimit opens 10,000 connections from one session: past
// its limit each gets 429 at once and holds nothing here, and another
// session is served meanwhile as usual.
func TestConnectionLimit(t *testing.T) {
	const n, limit = 10000, 256
	h := newHarness(t, &Options{MaxConnsPerSession: limit})
	pp, tp := h.port(h.plain), h.port(h.tls)
	pol := &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "api.test:" + tp, "127.0.0.1"}}
	greedy := h.unixSession("greedy", pol)
	other := unixClient(h.unixSession("other", pol))

	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Every connection opens a tunnel and keeps it.
	for range n {
		c, err := net.Dial("unix", greedy)
		for try := 0; err != nil && errors.Is(err, syscall.EAGAIN) && try < 1000; try++ {
			// The listen backlog is full: the proxy accepts (and
			// refuses) as fast as it can; a client waits its turn.
			time.Sleep(time.Millisecond)
			c, err = net.Dial("unix", greedy)
		}
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "CONNECT api.test:%s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", tp, tp)
	}
	if code, body := get(t, other, "http://api.test:"+pp+"/"); code != 200 {
		t.Fatalf("another session while one is at its limit: %d %q", code, body)
	}
	codes := map[int]int{}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("connection %d: %v", len(codes), err)
		}
		if resp.StatusCode == 429 {
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), "its limit") {
				t.Fatalf("past the limit: %q", b)
			}
		}
		codes[resp.StatusCode]++
	}
	if codes[200] != limit || codes[429] != n-limit {
		t.Fatalf("answers %v, want %d tunnels and %d refusals", codes, limit, n-limit)
	}
	if st := h.p.Stats("greedy"); st.Active != limit || st.Connections != n {
		t.Fatalf("stats %+v, want %d active of %d", st, limit, n)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// Once they are closed, the session has its places back.
	deadline := time.Now().Add(10 * time.Second)
	for h.p.Stats("greedy").Active != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, _ := get(t, unixClient(greedy), "http://api.test:"+pp+"/"); code != 200 {
		t.Fatalf("after closing: %d", code)
	}
}

// handOff does what the agent does: it hands the proxy the server side
// of a TCP connection over the session's socket, and returns the client
// side.
func handOff(t *testing.T, sock string, extra ...int) (net.Conn, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	f, _ := srv.(*net.TCPConn).File()
	defer f.Close()
	up, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	_, _, err = up.(*net.UnixConn).WriteMsgUnix([]byte{'F'}, syscall.UnixRights(append([]int{int(f.Fd())}, extra...)...), nil)
	return cli, err
}

func TestHandoff(t *testing.T) {
	h := newHarness(t, nil)
	pp := h.port(h.plain)
	sock := h.unixSession("ho", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "127.0.0.1"}})
	t.Run("a TCP socket is served", func(t *testing.T) {
		cli, err := handOff(t, sock)
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		cli.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(cli, "GET http://api.test:%s/h HTTP/1.1\r\nHost: api.test\r\n\r\n", pp)
		resp, err := http.ReadResponse(bufio.NewReader(cli), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "hello from api.test:"+pp+"/h" {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
	})
	t.Run("anything else is refused", func(t *testing.T) {
		r, w, _ := os.Pipe()
		defer r.Close()
		defer w.Close()
		// A pipe is no socket; two descriptors are one too many.
		for name, send := range map[string]func(*net.UnixConn) error{
			"pipe": func(up *net.UnixConn) error {
				_, _, err := up.WriteMsgUnix([]byte{'F'}, syscall.UnixRights(int(r.Fd())), nil)
				return err
			},
			"two": func(up *net.UnixConn) error {
				_, _, err := up.WriteMsgUnix([]byte{'F'}, syscall.UnixRights(int(r.Fd()), int(w.Fd())), nil)
				return err
			},
		} {
			up, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			if err := send(up.(*net.UnixConn)); err != nil {
				t.Fatal(err)
			}
			up.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := up.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("%s: the proxy answered (%d, %v)", name, n, err)
			}
			up.Close()
		}
		// The proxy kept nothing it was sent.
		deadline := time.Now().Add(5 * time.Second)
		for h.p.Stats("ho").Active != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if a := h.p.Stats("ho").Active; a != 0 {
			t.Fatalf("%d connections still held", a)
		}
	})
}

func TestForgetClosesTunnels(t *testing.T) {
	h := newHarness(t, nil)
	tp := h.port(h.tls)
	path := h.unixSession("f", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + tp, "127.0.0.1"}})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT api.test:%s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", tp, tp)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	h.p.Forget("f")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the tunnel outlived Forget")
	}
	if _, err := net.Dial("unix", path); err == nil {
		t.Fatal("the listener outlived Forget")
	}
}

func TestBandwidthLimit(t *testing.T) {
	// 1 MiB at 512 KiB/s, after a burst of 512 KiB, takes about a second.
	h := newHarness(t, &Options{BytesPerSecond: 512 << 10})
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 1<<20))
	}))
	defer big.Close()
	bp := big.URL[strings.LastIndexByte(big.URL, ':')+1:]
	c := unixClient(h.unixSession("bw", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + bp, "127.0.0.1"}}))
	start := time.Now()
	code, body := get(t, c, "http://api.test:"+bp+"/")
	if code != 200 || len(body) != 1<<20 {
		t.Fatalf("%d, %d bytes", code, len(body))
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("1 MiB at 512 KiB/s took %s: the bandwidth limit did not hold", d)
	}
}

func TestCollector(t *testing.T) {
	h := newHarness(t, nil)
	pp := h.port(h.plain)
	c := unixClient(h.unixSession("metrics", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + pp, "127.0.0.1"}}))
	get(t, c, "http://api.test:"+pp+"/")
	get(t, c, "http://nope.test:"+pp+"/")
	for deadline := time.Now().Add(5 * time.Second); h.p.Stats("metrics").Active > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.p.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if m.Counter != nil {
				got[key] = m.Counter.GetValue()
			} else if m.Gauge != nil {
				got[key] = m.Gauge.GetValue()
			}
		}
	}
	if got["mcpbox_egress_connections_total,session=metrics"] != 2 || got["mcpbox_egress_refusals_total,host=nope.test,session=metrics"] != 1 ||
		got["mcpbox_egress_bytes_total,direction=in,session=metrics"] == 0 {
		t.Fatalf("metrics: %v", got)
	}
}
