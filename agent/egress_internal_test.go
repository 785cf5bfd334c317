package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEgressRelay: bytes go through the loopback port to the upstream
// socket and back; a missing upstream and a full relay answer as a proxy
// would, saying why.
func TestEgressRelay(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	up, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// As the host's proxy does: take the handed socket.
				b, oob := make([]byte, 1), make([]byte, 64)
				_, oobn, _, _, err := c.(*net.UnixConn).ReadMsgUnix(b, oob)
				msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
				if err != nil || b[0] != HandoffByte || len(msgs) != 1 {
					return
				}
				fds, _ := syscall.ParseUnixRights(&msgs[0])
				f := os.NewFile(uintptr(fds[0]), "handed")
				hc, err := net.FileConn(f)
				f.Close()
				if err != nil {
					return
				}
				defer hc.Close()
				line, _ := bufio.NewReader(hc).ReadString('\n')
				io.WriteString(hc, "HTTP/1.1 200 OK\r\nContent-Length: "+itoa(len(line))+"\r\n\r\n"+line)
				<-hold
			}()
		}
	}()
	defer close(hold)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := &EgressConfig{Listen: "127.0.0.1:0", Upstream: "unix:" + sock, MaxConns: 2}
	// Port 0 needs the real address: listen first, then read it back.
	wait, err := startEgress(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	addr := relayAddr(t, ctx, cfg)

	do := func() (*http.Response, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "CONNECT x.test:443 HTTP/1.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp, string(b)
	}
	if resp, body := do(); resp.StatusCode != 200 || body != "CONNECT x.test:443 HTTP/1.1\r\n" {
		t.Fatalf("relayed: %d %q", resp.StatusCode, body)
	}
	// Handed off, connections hold nothing of the agent's: more than
	// MaxConns may be open at once.
	for range 3 {
		if resp, _ := do(); resp.StatusCode != 200 {
			t.Fatalf("handed off: %d", resp.StatusCode)
		}
	}
	up.Close()
}

// TestEgressRelayOverTCP: an upstream over TCP (a proxy beside the
// manager, on Kubernetes) gets the bytes relayed, at most MaxConns at once.
func TestEgressRelayOverTCP(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+itoa(len(line))+"\r\n\r\n"+line)
				<-hold
			}()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := &EgressConfig{Listen: "127.0.0.1:0", Upstream: "tcp:" + up.Addr().String(), MaxConns: 2}
	wait, err := startEgress(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	do := func() (int, string) {
		c, err := net.Dial("tcp", cfg.bound)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "CONNECT x.test:443 HTTP/1.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp.StatusCode, string(b)
	}
	if code, body := do(); code != 200 || body != "CONNECT x.test:443 HTTP/1.1\r\n" {
		t.Fatalf("relayed: %d %q", code, body)
	}
	do()
	if code, body := do(); code != 429 || !strings.Contains(body, "2 connections") {
		t.Fatalf("past MaxConns: %d %q", code, body)
	}
}

func TestEgressRelayNoUpstream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := &EgressConfig{Listen: "127.0.0.1:0", Upstream: "unix:" + filepath.Join(t.TempDir(), "gone.sock")}
	wait, err := startEgress(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	c, err := net.Dial("tcp", relayAddr(t, ctx, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 502 || !strings.Contains(string(b), "egress proxy cannot be reached") {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if _, err := startEgress(ctx, &EgressConfig{Upstream: "udp:x"}); err == nil {
		t.Fatal("a bad upstream was accepted")
	}
}

func TestProxyEnv(t *testing.T) {
	env := withProxyEnv(map[string]string{"PATH": "/bin", "NO_PROXY": "mine"}, &EgressConfig{})
	for k, v := range map[string]string{"HTTP_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
		"PATH": "/bin", "NO_PROXY": "mine", "no_proxy": "localhost,127.0.0.1,::1"} {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
}

func relayAddr(t *testing.T, _ context.Context, cfg *EgressConfig) string {
	t.Helper()
	if cfg.bound == "" {
		t.Fatal("the relay did not record its address")
	}
	return cfg.bound
}

func itoa(n int) string { return strconv.Itoa(n) }
