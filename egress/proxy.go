// Package egress is the host-side forward proxy through which sandboxes
// reach the outside world, when their network policy lets them.
//
// A sandbox has no network interface but lo. Inside it, the agent listens
// on a loopback port and passes every connection it accepts to this
// proxy over a listener made for that sandbox alone (Serve): the proxy
// knows which session a connection belongs to from the listener it
// arrived on, never from anything the sandbox says. Over a Unix socket
// the agent hands over the connection itself (its TCP socket, as
// SCM_RIGHTS, after one byte, HandoffByte in the agent), which the proxy
// serves only if it is a TCP socket; any other first byte starts a
// relayed stream. Each connection carries HTTP proxy requests: CONNECT
// host:port for TLS (pip, npm, git, curl https://…) and absolute-form
// requests for plain HTTP, one per connection.
//
// For every request the proxy reads the session's current policy
// (Options.Policy), so a change applies to the next connection. It
// matches the host by name (case, trailing dot and IDNA normalized;
// wildcards) or, for an IP literal, by address; deny-lists win. Then it
// resolves the name itself (the sandbox has no DNS) and drops loopback,
// private, link-local, multicast and cloud-metadata addresses unless the
// policy names them by address, so a name that rebinds to 127.0.0.1
// reaches nothing. Only ports 80 and 443 pass unless a pattern names
// another. A refusal is an HTTP error whose status line and body say
// which policy refused which host and what to ask for instead.
//
// Per session the proxy counts connections, bytes and refusals by host
// (Stats, Collector), bounds concurrent connections and bandwidth, and,
// across sessions, the descriptors it holds.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
)

// Resolver looks host names up; *net.Resolver is one. Tests map names to
// loopback addresses with their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Proxy. Policy is required.
type Options struct {
	// Policy returns session's current network policy; nil means none.
	// It is called for every request, so it should be quick.
	Policy func(ctx context.Context, session string) (*mcpbox.NetworkPolicy, error)
	// Resolver resolves names; default net.DefaultResolver.
	Resolver Resolver
	// Dial connects to an admitted address ("ip:port"); default a
	// net.Dialer. Tests use it to reach loopback servers.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxConnsPerSession bounds one session's open connections; default 256.
	MaxConnsPerSession int
	// MaxConns bounds the open connections of every session together
	// (each holds two descriptors here); default a quarter of this
	// process's descriptor limit, at least 64.
	MaxConns int
	// BytesPerSecond bounds one session's bandwidth, both directions
	// together; 0 means unbounded.
	BytesPerSecond int64
	// DialTimeout bounds resolving and connecting; default 10 s.
	DialTimeout time.Duration
	// HeaderTimeout bounds reading a request's head; default 30 s.
	HeaderTimeout time.Duration
	// Logger receives refusals (session, host, reason); nil discards.
	Logger *slog.Logger
}

// Proxy is the egress proxy. It is safe for concurrent use.
type Proxy struct {
	opts   Options
	log    *slog.Logger
	global chan struct{}
	// refusing bounds the connections being answered with a refusal at
	// once: past it, a connection over a limit is closed unanswered, so a
	// flood of them cannot hold descriptors either.
	refusing chan struct{}

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
}

// New returns a Proxy; opts.Policy must be set.
func New(opts *Options) (*Proxy, error) {
	if opts == nil || opts.Policy == nil {
		return nil, errors.New("egress: Options.Policy is required")
	}
	o := *opts
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Dial == nil {
		d := &net.Dialer{}
		o.Dial = d.DialContext
	}
	if o.MaxConnsPerSession <= 0 {
		o.MaxConnsPerSession = 256
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 64
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur/4 > 64 && rl.Cur != unix.RLIM_INFINITY {
			o.MaxConns = int(min(rl.Cur/4, 1<<20))
		}
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 30 * time.Second
	}
	p := &Proxy{opts: o, log: o.Logger, global: make(chan struct{}, o.MaxConns), refusing: make(chan struct{}, 1024),
		sessions: map[string]*session{}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// session is one session's state in the proxy: its listener's server,
// its limits and its counters, which outlive a listener replaced by
// another Serve (a takeover).
type session struct {
	id    string
	p     *Proxy
	sem   chan struct{}
	rate  *rateLimiter
	stats counters

	mu      sync.Mutex
	srv     *http.Server
	tunnels map[net.Conn]struct{}
}

func (p *Proxy) session(id string) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[id]
	if s == nil {
		s = &session{id: id, p: p, sem: make(chan struct{}, p.opts.MaxConnsPerSession),
			rate: newRateLimiter(p.opts.BytesPerSecond), tunnels: map[net.Conn]struct{}{}}
		p.sessions[id] = s
	}
	return s
}

// Serve accepts session's relayed connections on ln, in the background,
// until Forget or Close. A second Serve for the same session (after a
// takeover) replaces the first listener and keeps the counters.
func (p *Proxy) Serve(session string, ln net.Listener) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		ln.Close()
		return errors.New("egress: proxy closed")
	}
	s := p.session(session)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: p.opts.HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          discardLog,
	}
	s.mu.Lock()
	old := s.srv
	s.srv = srv
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	go srv.Serve(&limitListener{Listener: ln, s: s})
	return nil
}

// Forget stops serving session: its listener, its open connections and
// its counters are gone.
func (p *Proxy) Forget(session string) {
	p.mu.Lock()
	s := p.sessions[session]
	delete(p.sessions, session)
	p.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// Serving reports whether this proxy serves session.
func (p *Proxy) Serving(session string) bool {
	p.mu.Lock()
	s := p.sessions[session]
	p.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// PolicyChanged is told when session's policy changed. Nothing admitted
// under the old one is kept for reuse (plain HTTP is one request per
// connection), and every new request reads the policy afresh, so there
// is nothing to drop: open tunnels carry on, as documented.
func (p *Proxy) PolicyChanged(session string) {}

// Close stops serving every session.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	all := p.sessions
	p.sessions = map[string]*session{}
	p.mu.Unlock()
	for _, s := range all {
		s.close()
	}
	return nil
}

func (s *session) close() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	tunnels := s.tunnels
	s.tunnels = map[net.Conn]struct{}{}
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	for c := range tunnels {
		c.Close()
	}
}

var discardLog = newDiscardLog()

// ServeHTTP serves one proxy request of the session.
func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pol, err := s.policy(r.Context())
	if err != nil {
		s.p.log.Warn("egress policy unavailable", "session", s.id, "err", err)
		s.refuse(w, &refusal{http.StatusServiceUnavailable, "", "this session's network policy could not be read: " + err.Error()})
		return
	}
	if r.Method == http.MethodConnect {
		s.connect(w, r, pol)
		return
	}
	s.forward(w, r, pol)
}

func (s *session) policy(ctx context.Context) (*policy, error) {
	np, err := s.p.opts.Policy(ctx, s.id)
	if err != nil {
		return nil, err
	}
	return compile(np)
}

// refuse answers r with ref and closes the connection.
func (s *session) refuse(w http.ResponseWriter, ref *refusal) {
	if ref.status == http.StatusForbidden {
		s.refused(ref.host, ref.reason)
	}
	h, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "mcpbox egress: "+ref.reason, ref.status)
		return
	}
	c, brw, err := h.Hijack()
	if err != nil {
		return
	}
	brw.Flush()
	refuseRaw(c, ref.status, ref.reason, 50*time.Millisecond)
}

func (s *session) refused(host, reason string) {
	s.stats.refuse(host)
	s.p.log.Info("egress refused", "session", s.id, "host", host, "reason", reason)
}

// target parses "host:port" (port defaulting to def) from a request.
func splitTarget(hostport string, def int) (string, int, *refusal) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		if def == 0 {
			return "", 0, &refusal{http.StatusBadRequest, hostport, fmt.Sprintf("CONNECT needs host:port, got %q", hostport)}
		}
		host, ps = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), strconv.Itoa(def)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, &refusal{http.StatusBadRequest, hostport, fmt.Sprintf("bad host or port in %q", hostport)}
	}
	return host, port, nil
}

// connect serves CONNECT host:port: a tunnel, once the policy admits it.
func (s *session) connect(w http.ResponseWriter, r *http.Request, pol *policy) {
	host, port, ref := splitTarget(r.Host, 0)
	if ref != nil {
		s.refuse(w, ref)
		return
	}
	t, ref := pol.check(host, port)
	if ref != nil {
		s.refuse(w, ref)
		return
	}
	up, ref := s.dial(r.Context(), pol, t)
	if ref != nil {
		s.refuse(w, ref)
		return
	}
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		up.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		c.Close()
		up.Close()
		return
	}
	// A client may send its first bytes (a TLS hello) before reading the
	// 200; what the server buffered goes first.
	var first []byte
	if n := brw.Reader.Buffered(); n > 0 {
		first, _ = brw.Reader.Peek(n)
	}
	s.tunnel(c, up, first)
}

// tunnel copies both ways until both ends are done, counting and
// throttling, and can be cut by Forget.
func (s *session) tunnel(c, up net.Conn, first []byte) {
	if !s.track(c) {
		c.Close()
		up.Close()
		return
	}
	defer func() {
		s.untrack(c)
		c.Close()
		up.Close()
	}()
	if len(first) > 0 {
		if _, err := up.Write(first); err != nil {
			return
		}
		s.stats.out.Add(int64(len(first)))
	}
	done := make(chan struct{})
	go func() {
		s.copy(c, up, &s.stats.in)
		closeWrite(c)
		close(done)
	}()
	if err := s.copy(up, c, &s.stats.out); err != nil {
		// The sandbox's side broke: nothing more will be read.
		up.Close()
	}
	closeWrite(up)
	<-done
}

// track registers a hijacked connection, so that Forget can cut it;
// false when the session was forgotten meanwhile.
func (s *session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return false
	}
	s.tunnels[c] = struct{}{}
	return true
}

func (s *session) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.tunnels, c)
	s.mu.Unlock()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// Buffers for copying: every stream starts with a small one and takes a
// large one while it moves bulk data (its reads fill the buffer), giving
// it back when it slows down; at most maxBigBuffers are out at once, so
// many idle or slow tunnels cost little memory. Plain reads and writes
// with 1 MiB buffers measured faster than splice between the two sockets
// (BENCHMARKS.md, issue 14).
const (
	smallBuffer   = 32 << 10
	bigBuffer     = 1 << 20
	maxBigBuffers = 64
)

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuffer); return &b }}
	bigPool   = sync.Pool{New: func() any { b := make([]byte, bigBuffer); return &b }}
	bigSlots  = make(chan struct{}, maxBigBuffers)
)

// copy moves bytes from src to dst, counting them into n and keeping to
// the session's bandwidth.
func (s *session) copy(dst io.Writer, src io.Reader, n *atomic.Int64) error {
	if tc, ok := dst.(*trackedConn); ok {
		dst = tc.raw()
	}
	if tc, ok := src.(*trackedConn); ok {
		src = tc.raw()
	}
	sp := smallPool.Get().(*[]byte)
	defer smallPool.Put(sp)
	var bp *[]byte
	release := func() {
		if bp != nil {
			bigPool.Put(bp)
			bp = nil
			<-bigSlots
		}
	}
	defer release()
	// With a bandwidth limit, a read takes at most a tenth of a second's
	// worth, and is paid for before it is passed on.
	most := bigBuffer
	if s.rate != nil {
		most = max(int(s.rate.rate/10), 1<<10)
	}
	for {
		buf := *sp
		if bp != nil {
			buf = *bp
		}
		buf = buf[:min(len(buf), most)]
		k, err := src.Read(buf)
		if k > 0 {
			s.rate.wait(k)
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
			n.Add(int64(k))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case bp == nil && k == len(buf) && most > smallBuffer:
			select {
			case bigSlots <- struct{}{}:
				bp = bigPool.Get().(*[]byte)
			default:
			}
		case bp != nil && k < len(buf)/8:
			release()
		}
	}
}

// dial resolves t (unless it is an address), keeps the addresses the
// policy admits and connects to the first that answers.
func (s *session) dial(ctx context.Context, pol *policy, t *target) (net.Conn, *refusal) {
	ctx, cancel := context.WithTimeout(ctx, s.p.opts.DialTimeout)
	defer cancel()
	addrs := []netip.Addr{t.addr}
	if !t.addr.IsValid() {
		got, err := s.p.opts.Resolver.LookupNetIP(ctx, "ip", t.host)
		if err != nil {
			return nil, &refusal{http.StatusBadGateway, t.host, fmt.Sprintf("cannot resolve %s: %v", t.host, errText(err))}
		}
		var ref *refusal
		if addrs, ref = pol.admit(t, got); ref != nil {
			return nil, ref
		}
	}
	var last error
	for _, a := range addrs {
		c, err := s.p.opts.Dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, &refusal{http.StatusBadGateway, t.host, fmt.Sprintf("cannot connect to %s: %v", hostPort(t.host, t.port), errText(last))}
}

func errText(err error) string {
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Err != nil {
		return ne.Err.Error()
	}
	return err.Error()
}

// hopHeaders are a single connection's business, not forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward serves a plain-HTTP proxy request (absolute form): it is sent
// upstream with Connection: close, and the answer goes back byte for
// byte until the upstream closes, then the client's connection closes
// too. One request per connection keeps every request's host checked
// (a kept-alive connection could carry the next one to another host)
// and lets the kernel move the answer.
func (s *session) forward(w http.ResponseWriter, r *http.Request, pol *policy) {
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		s.refuse(w, &refusal{http.StatusBadRequest, r.Host, "this is mcpbox's egress proxy: send http://host/path requests, or CONNECT host:443 for https (set HTTP_PROXY and HTTPS_PROXY, as the sandbox does)"})
		return
	}
	host, port, ref := splitTarget(r.URL.Host, 80)
	var t *target
	if ref == nil {
		t, ref = pol.check(host, port)
	}
	var up net.Conn
	if ref == nil {
		up, ref = s.dial(r.Context(), pol, t)
	}
	if ref != nil {
		s.refuse(w, ref)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range strings.Split(r.Header.Get("Connection"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			out.Header.Del(h)
		}
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Close = true
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = &countingReader{r: r.Body, s: s, n: &s.stats.out}
	}
	// The request (and its body, read from the client as it goes) first,
	// while the server still owns the client's connection.
	bw := bufio.NewWriterSize(up, 4<<10)
	if err := out.Write(bw); err == nil {
		err = bw.Flush()
	} else {
		up.Close()
		s.refuse(w, &refusal{http.StatusBadGateway, t.host, fmt.Sprintf("sending the request to %s failed: %v", hostPort(t.host, port), errText(err))})
		return
	}
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		up.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if !s.track(c) {
		c.Close()
		up.Close()
		return
	}
	defer func() {
		s.untrack(c)
		c.Close()
		up.Close()
	}()
	s.copy(c, up, &s.stats.in)
	closeWrite(c)
}

type countingReader struct {
	r io.ReadCloser
	s *session
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	if k > 0 {
		c.s.rate.wait(k)
		c.n.Add(int64(k))
	}
	return k, err
}

func (c *countingReader) Close() error { return c.r.Close() }
