package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EgressConfig is the sandbox's way out: a loopback port inside the
// sandbox that every process's HTTP_PROXY and HTTPS_PROXY name. Each
// connection accepted there is handed to the host's egress proxy over a
// Unix socket (the socket itself, as SCM_RIGHTS, so that the bytes never
// pass through the agent), or relayed over TCP. The host's proxy
// tells sessions apart by the socket a connection arrives on, so
// nothing the sandbox sends can claim another session's policy.
type EgressConfig struct {
	// Listen is the loopback address processes reach the proxy at;
	// default 127.0.0.1:3128.
	Listen string `json:"listen,omitempty"`
	// Upstream is where each connection is relayed: "unix:PATH" or
	// "tcp:HOST:PORT".
	Upstream string `json:"upstream"`
	// MaxConns bounds the connections the agent holds at once (being
	// handed over, or relayed over TCP), so user code cannot use up the
	// agent's descriptors; default 1024. A connection handed to the
	// proxy (over Unix) leaves the agent at once: the proxy's own
	// per-session limit bounds those.
	MaxConns int `json:"max_conns,omitempty"`

	bound string // the address listened on, once started
}

// DefaultEgressListen is where processes in a sandbox find the proxy.
const DefaultEgressListen = "127.0.0.1:3128"

// proxyEnv is the environment that points every process at the relay.
// Both spellings: curl reads only lowercase http_proxy, Go and Python
// read either, and tools differ on NO_PROXY.
func (e *EgressConfig) proxyEnv() map[string]string {
	u := "http://" + e.listen()
	no := "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": u, "http_proxy": u, "HTTPS_PROXY": u, "https_proxy": u,
		"NO_PROXY": no, "no_proxy": no,
		// Node's own fetch and https follow the variables only when asked.
		"NODE_USE_ENV_PROXY": "1",
	}
}

func (e *EgressConfig) listen() string {
	if e.Listen == "" {
		return DefaultEgressListen
	}
	return e.Listen
}

func (e *EgressConfig) validate() error {
	network, _, ok := strings.Cut(e.Upstream, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return fmt.Errorf("egress upstream %q: want unix:PATH or tcp:HOST:PORT", e.Upstream)
	}
	return nil
}

// relay serves the egress listener until ctx ends.
type relay struct {
	cfg       *EgressConfig
	ln        net.Listener
	slots     chan struct{}
	answering chan struct{} // refusals being answered
	dialer    net.Dialer
	network   string
	addr      string
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	shutdown  bool
}

// startEgress listens on the configured loopback address and relays
// until ctx ends; the returned function waits for it to stop.
func startEgress(ctx context.Context, cfg *EgressConfig) (func(), error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.listen())
	if err != nil {
		return nil, fmt.Errorf("egress: listen on %s: %w", cfg.listen(), err)
	}
	max := cfg.MaxConns
	if max <= 0 {
		max = 1024
	}
	network, addr, _ := strings.Cut(cfg.Upstream, ":")
	r := &relay{cfg: cfg, ln: ln, slots: make(chan struct{}, max), answering: make(chan struct{}, 64), network: network, addr: addr,
		conns: map[net.Conn]struct{}{}}
	r.dialer.Timeout = 10 * time.Second
	cfg.bound = ln.Addr().String()
	go func() {
		<-ctx.Done()
		r.close()
	}()
	r.wg.Add(1)
	go r.serve()
	return r.wg.Wait, nil
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	r.shutdown = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
}

func (r *relay) serve() {
	defer r.wg.Done()
	var delay time.Duration
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, most likely: wait, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		select {
		case r.slots <- struct{}{}:
		default:
			// Answered in the background, a bounded number at once; past
			// that, closed unanswered: a flood costs no descriptors.
			select {
			case r.answering <- struct{}{}:
				go func() {
					defer func() { <-r.answering }()
					answer(c, "429 Too Many Requests", fmt.Sprintf("this sandbox already has %d connections open through the egress proxy; close some and retry", cap(r.slots)))
				}()
			default:
				c.Close()
			}
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.slots }()
			r.relay(c)
		}()
	}
}

// relay hands one connection to the host's proxy, or (over TCP, as on
// Kubernetes) copies it there and back.
func (r *relay) relay(c net.Conn) {
	up, err := r.dialer.Dial(r.network, r.addr)
	if err != nil {
		answer(c, "502 Bad Gateway", "the host's egress proxy cannot be reached ("+err.Error()+"); the mcpbox process that looks after this sandbox may be restarting, retry shortly")
		return
	}
	if uc, ok := up.(*net.UnixConn); ok {
		if tc, ok := c.(*net.TCPConn); ok {
			r.handOff(tc, uc)
			return
		}
	}
	if !r.track(c, up) {
		return
	}
	defer r.untrack(c, up)
	done := make(chan struct{})
	go func() {
		io.Copy(c, up)
		halfClose(c)
		close(done)
	}()
	if _, err := io.Copy(up, c); err != nil {
		up.Close()
	}
	halfClose(up)
	<-done
}

// HandoffByte starts a connection to the host's proxy that carries, as
// SCM_RIGHTS, the sandbox process's own TCP connection: the proxy then
// serves it directly, and the bytes between it and the outside never
// pass through the agent. No HTTP method starts with
// it, so the proxy tells a handed-off connection from a relayed stream
// by its first byte.
const HandoffByte = 'F'

// handOff gives c to the proxy over up and lets go of both.
func (r *relay) handOff(c *net.TCPConn, up *net.UnixConn) {
	defer c.Close()
	defer up.Close()
	f, err := c.File()
	if err != nil {
		answer(c, "502 Bad Gateway", "handing the connection to the egress proxy failed: "+err.Error())
		return
	}
	defer f.Close()
	up.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := up.WriteMsgUnix([]byte{HandoffByte}, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		answer(c, "502 Bad Gateway", "handing the connection to the egress proxy failed: "+err.Error())
	}
}

func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shutdown {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	for _, c := range cs {
		delete(r.conns, c)
	}
	r.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// answer replies to a client the relay cannot serve, as a proxy would.
func answer(c net.Conn, status, msg string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	body := "mcpbox egress: " + msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(body), body)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
}

// withProxyEnv adds the proxy variables to env, leaving any the caller
// set on purpose.
func withProxyEnv(env map[string]string, e *EgressConfig) map[string]string {
	out := make(map[string]string, len(env)+8)
	for k, v := range e.proxyEnv() {
		out[k] = v
	}
	for k, v := range env {
		out[k] = v
	}
	return out
}
