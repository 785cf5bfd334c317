package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
)

func zeroServer() *httptest.Server {
	buf := make([]byte, 1<<20)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	}))
}

// BenchmarkDownload fetches 1 GiB from a loopback server with curl on
// the host: directly, then through the proxy (plain HTTP), in every
// iteration. The sandbox's side (runtime/local's BenchmarkEgressDownload)
// adds the agent's hand-off.
func BenchmarkDownload(b *testing.B) {
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip("curl is not installed")
	}
	h := newHarness(&testing.T{}, nil)
	srv := zeroServer()
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	proxy := h.tcpSession("bench", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + port, "127.0.0.1"}})
	speed := func(args ...string) float64 {
		out, err := exec.Command("curl", append([]string{"-sS", "-o", "/dev/null", "-w", "%{speed_download}"}, args...)...).Output()
		if err != nil {
			b.Fatal(err)
		}
		v, _ := strconv.ParseFloat(string(out), 64)
		return v
	}
	// This process is the server, and the proxy too: the CPU it spends
	// beyond the direct download's is the proxy's.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var direct, proxied float64
	var directCPU, proxiedCPU time.Duration
	for b.Loop() {
		c0 := cpu()
		direct += speed("--noproxy", "*", srv.URL+"/big")
		c1 := cpu()
		proxied += speed("--noproxy", "", "-x", proxy, "http://api.test:"+port+"/big")
		c2 := cpu()
		directCPU += c1 - c0
		proxiedCPU += c2 - c1
	}
	b.ReportMetric(direct/float64(b.N)/1e6, "direct-MB/s")
	b.ReportMetric(proxied/float64(b.N)/1e6, "proxied-MB/s")
	b.ReportMetric(proxied/direct, "ratio")
	b.ReportMetric(float64((proxiedCPU-directCPU)/time.Millisecond)/float64(b.N), "proxy-cpu-ms/GiB")
	b.ReportMetric(float64(directCPU/time.Millisecond)/float64(b.N), "server-cpu-ms/GiB")
}

// BenchmarkConnLatency times a new connection and one small request,
// directly to a loopback server and through the proxy, alternating; it
// reports the p50 of each and what the proxy adds.
func BenchmarkConnLatency(b *testing.B) {
	h := newHarness(&testing.T{}, nil)
	srv := zeroServer()
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	proxy := strings.TrimPrefix(h.tcpSession("lat", &mcpbox.NetworkPolicy{Allow: []string{"api.test:" + port, "127.0.0.1"}}), "http://")
	one := func(addr, target string) time.Duration {
		t0 := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
		return time.Since(t0)
	}
	var d, p []time.Duration
	for b.Loop() {
		d = append(d, one("127.0.0.1:"+port, "/small"))
		p = append(p, one(proxy, "http://api.test:"+port+"/small"))
	}
	med := func(x []time.Duration) float64 {
		sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
		return float64(x[len(x)/2].Microseconds())
	}
	dm, pm := med(d), med(p)
	b.ReportMetric(dm, "direct-p50-µs")
	b.ReportMetric(pm, "proxied-p50-µs")
	b.ReportMetric(pm-dm, "added-p50-µs")
}
