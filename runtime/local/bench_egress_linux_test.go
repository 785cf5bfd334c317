package local_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

var zeroHandler = func() http.Handler {
	buf := make([]byte, 1<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			w.Write([]byte("ok"))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(1<<30))
		for range 1 << 10 {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})
}()

// zeros serves /big, 1 GiB of zeros, and /small, two bytes.
func zeros() *httptest.Server { return httptest.NewServer(zeroHandler) }

// BenchmarkEgressDownload downloads 1 GiB from a loopback server with
// curl: on the host, directly, and in a sandbox, through the agent's
// hand-off and the egress proxy, one after the other in every iteration
// so both meet the machine in the same state; over plain HTTP and over
// HTTPS (a CONNECT tunnel, as pip and npm use). It reports each side's
// MB/s and their ratio. The sandbox is a medium one (2 CPUs), so that its
// cgroup does not hold curl below what the host's curl may use.
func BenchmarkEgressDownload(b *testing.B) {
	pols := &policies{m: map[string]*mcpbox.NetworkPolicy{}}
	rt, _ := newEgressRuntime(b, testutil.Home(b), pols, nil)
	for _, scheme := range []string{"http", "https"} {
		b.Run(scheme, func(b *testing.B) {
			srv := httptest.NewUnstartedServer(zeroHandler)
			if scheme == "https" {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
			_, c := newNetSandboxOf(b, rt, pols, &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + port, "127.0.0.1"}}, mcpbox.Flavors["medium"])
			curl := "curl -sSk -o /dev/null -w '%{speed_download}' "
			var direct, proxied float64
			for b.Loop() {
				out, err := exec.Command("sh", "-c", curl+"--noproxy '*' "+srv.URL+"/big").Output()
				if err != nil {
					b.Fatal(err)
				}
				d, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
				p, _ := strconv.ParseFloat(shOut(b, c, curl+scheme+"://api.test:"+port+"/big"), 64)
				if d == 0 || p == 0 {
					b.Fatalf("speeds %v %v", d, p)
				}
				direct += d
				proxied += p
			}
			n := float64(b.N)
			b.ReportMetric(direct/n/1e6, "direct-MB/s")
			b.ReportMetric(proxied/n/1e6, "proxied-MB/s")
			b.ReportMetric(proxied/direct, "ratio")
		})
	}
}

// latencyScript opens N new connections one after another, each sending
// one GET and reading the answer, and prints the p50 and p90 in µs.
const latencyScript = `
import socket, sys, time
host, port, target, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
req = ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target).encode()
ts = []
for i in range(n):
    t0 = time.perf_counter()
    s = socket.create_connection((host, port))
    s.sendall(req)
    while s.recv(65536):
        pass
    s.close()
    ts.append(time.perf_counter() - t0)
ts.sort()
print("%d %d" % (ts[len(ts)//2] * 1e6, ts[len(ts)*9//10] * 1e6))
`

// BenchmarkEgressConnLatency measures a new connection and one small
// request: from the host to a loopback server directly, and from a
// sandbox through the relay and the proxy, with the same Python script
// on both sides. It reports the p50 and p90 of each and what the proxy
// adds at p50.
func BenchmarkEgressConnLatency(b *testing.B) {
	pols := &policies{m: map[string]*mcpbox.NetworkPolicy{}}
	rt, _ := newEgressRuntime(b, testutil.Home(b), pols, nil)
	srv := zeros()
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	_, c := newNetSandbox(b, rt, pols, &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + port, "127.0.0.1"}})
	const n = "2000"
	var d50, d90, p50, p90 float64
	parse := func(s string) (float64, float64) {
		var a, b2 float64
		fmt.Sscan(s, &a, &b2)
		return a, b2
	}
	for b.Loop() {
		out, err := exec.Command("/usr/bin/python3", "-c", latencyScript, "127.0.0.1", port, "/small", n).Output()
		if err != nil {
			b.Fatal(err)
		}
		a, b9 := parse(string(out))
		d50, d90 = d50+a, d90+b9
		out2 := shOut(b, c, "python3 -c '"+latencyScript+"' 127.0.0.1 3128 http://api.test:"+port+"/small "+n)
		a, b9 = parse(out2)
		if a == 0 {
			b.Fatalf("sandbox: %q", out2)
		}
		p50, p90 = p50+a, p90+b9
	}
	k := float64(b.N)
	b.ReportMetric(d50/k, "direct-p50-µs")
	b.ReportMetric(d90/k, "direct-p90-µs")
	b.ReportMetric(p50/k, "proxied-p50-µs")
	b.ReportMetric(p90/k, "proxied-p90-µs")
	b.ReportMetric((p50-d50)/k, "added-p50-µs")
}
