package mcpserver_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/egress"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
)

type loopDNS struct{}

func (loopDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestNetworkWithoutProxy(t *testing.T) {
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: testutil.NewFakeRuntime(), WarmKernel: noWarm})
	cs := e.connect(t, "alice", nil)
	r := fails(t, cs, "create_session", map[string]any{"network": map[string]any{"allow": []string{"pypi.org"}}}, mcpbox.EUNSUPPORTED)
	if !strings.Contains(r.text(), "egress proxy") {
		t.Fatalf("text: %q", r.text())
	}
	r = fails(t, cs, "create_session", map[string]any{"network": map[string]any{"allow": []string{"no such host"}}}, mcpbox.EINVALID)
	if !strings.Contains(r.text(), `network allow entry "no such host"`) {
		t.Fatalf("text: %q", r.text())
	}
}

// TestNetworkTools: a session created with an allow-list reaches the
// host it names from Python, gets the proxy's reason for any other,
// execute_code can change the policy, and get_sessions shows it all.
func TestNetworkTools(t *testing.T) {
	testutil.RequireRoot(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]

	var m *manager.Manager
	p, err := egress.New(&egress.Options{Resolver: loopDNS{},
		Policy: func(ctx context.Context, id string) (*mcpbox.NetworkPolicy, error) { return m.EgressPolicy(ctx, id) }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rt, err := local.New(&local.Options{Home: testutil.Home(t), Egress: p})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, mcpserver.Options{}, manager.Options{Runtime: rt, Egress: p})
	m = e.m
	cs := e.connect(t, "alice", nil)

	created := ok(t, cs, "create_session", map[string]any{"network": map[string]any{"allow": []string{"API.test:" + port, "127.0.0.1"}}})
	id, _ := created.S["session_id"].(string)
	testutil.Track(id)
	if created.S["network"] != "allow api.test:"+port+", 127.0.0.1" {
		t.Fatalf("created: %v", created.S)
	}
	fetch := func(host string) string {
		r := call(t, cs, "execute_code", map[string]any{"session_id": id, "code": fmt.Sprintf(`
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://%s:%s/", timeout=10).read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
`, host, port)})
		return strings.TrimSpace(fmt.Sprint(r.S["stdout"]))
	}
	if out := fetch("api.test"); out != "hello api.test:"+port {
		t.Fatalf("allowed host: %q", out)
	}
	if out := fetch("other.test"); !strings.HasPrefix(out, "403 mcpbox egress: other.test:"+port+" is not on the allow-list") {
		t.Fatalf("another host: %q", out)
	}
	ok(t, cs, "execute_code", map[string]any{"session_id": id, "code": "1", "network": map[string]any{"allow": []string{"other.test:" + port, "127.0.0.1"}}})
	if out := fetch("other.test"); out != "hello other.test:"+port {
		t.Fatalf("after the change: %q", out)
	}
	got := ok(t, cs, "get_sessions", map[string]any{"session_id": id})
	s := got.S["sessions"].([]any)[0].(map[string]any)
	eg, _ := s["egress"].(map[string]any)
	if s["network"] != "allow other.test:"+port+", 127.0.0.1" || eg["connections"].(float64) < 3 || eg["refused"].(float64) != 1 {
		t.Fatalf("get_sessions: %v", s)
	}
	if !strings.Contains(got.text(), "network: allow other.test") {
		t.Fatalf("get_sessions text: %q", got.text())
	}
}
