package httpserver

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Defaults for the connection limits in Options.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultStreamKeepAlive   = 30 * time.Second
	DefaultMaxConns          = 1024
)

// Server returns an *http.Server serving h with the header and idle
// timeouts of Options. Serve it on [Handler.Listener], which bounds the
// connections.
//
// It sets no WriteTimeout, which would cut event streams and long tool
// calls, and no ReadTimeout: the handler bounds request bodies itself (see
// Options.BodyTimeout), so the bound does not depend on this server.
func (h *Handler) Server() *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: h.opts.ReadHeaderTimeout,
		// Longer than the keep-alive of common clients (Go 90 s, Node and
		// Python a few seconds), so a client closes first and never sends
		// on a connection the server is closing.
		IdleTimeout: h.opts.IdleTimeout,
		ErrorLog:    slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
}

// Listener returns ln bounded to Options.MaxConns open connections. Past
// the bound, Accept waits until one closes: new connections queue in the
// kernel's listen backlog, which costs no descriptor in this process, and
// are served in order as others end (the timeouts guarantee they do). A
// burst above the bound is served late rather than refused; a client that
// gives up waiting sees a connect or read timeout. Accept-and-close would
// spend a descriptor and a syscall per refused connection and fail
// healthy clients during a burst.
func (h *Handler) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, h.opts.MaxConns)
}

// withConnDefaults fills in the connection limits left zero.
func (o *Options) withConnDefaults() {
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.BodyTimeout == 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.StreamKeepAlive == 0 {
		o.StreamKeepAlive = DefaultStreamKeepAlive
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
}

// limitBody gives r's body a read deadline of d from now, so a client that
// sends its body slowly or not at all is cut off. It lives in the handler,
// not in http.Server.ReadTimeout, so the bound holds on whatever server
// serves the handler.
//
// Streams and long calls are not cut: net/http lifts the read deadline
// when it starts watching the connection for the client going away, which
// is at once for a request without a body and at the body's EOF for the
// rest (TestBodyDeadlineLiftedAtEOF holds it to that). A body left unread
// stays bounded while net/http discards it after the handler.
func limitBody(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	// An error means no connection to bound (a test recorder).
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
}

// keepStreamAlive serves next with a ResponseWriter that writes an SSE
// comment into an event stream that has been quiet for every. The go-sdk
// sends nothing on an idle stream, and proxies and load balancers drop a
// connection that is quiet for a minute or so; a write is also how a
// client that vanished without a FIN is noticed (a failed write cancels the
// request), freeing its descriptor and goroutines.
func keepStreamAlive(next http.Handler, every time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w, every: every}
		defer sw.finish()
		next.ServeHTTP(sw, r)
	})
}

// streamWriter serialises the handler's writes with keepalive comments. A
// comment goes out only right after a flush, which is where the go-sdk
// ends every event, so it never splits one.
type streamWriter struct {
	http.ResponseWriter
	every time.Duration

	mu      sync.Mutex
	flushed bool          // the last operation was a flush
	wrote   bool          // the handler wrote since the last tick
	done    bool          // the handler returned: w is no longer ours
	stop    chan struct{} // non-nil once the keepalive goroutine runs
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushed, s.wrote = false, true
	return s.ResponseWriter.Write(p)
}

func (s *streamWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ResponseWriter.WriteHeader(code)
}

// FlushError flushes and, on the first flush of an event stream, starts
// the keepalive goroutine. Headers are sent by then, so reading them here
// does not race the handler.
func (s *streamWriter) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := http.NewResponseController(s.ResponseWriter).Flush()
	s.flushed = true
	if s.stop == nil && !s.done && strings.HasPrefix(s.Header().Get("Content-Type"), "text/event-stream") {
		s.stop = make(chan struct{})
		go s.keepAlive(s.stop)
	}
	return err
}

// Flush is FlushError for callers that type-assert http.Flusher.
func (s *streamWriter) Flush() { s.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *streamWriter) keepAlive(stop chan struct{}) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if !s.done && s.flushed && !s.wrote {
			// A failed write cancels the request in net/http; nothing
			// else to do with the error.
			if _, err := io.WriteString(s.ResponseWriter, ": keepalive\n\n"); err == nil {
				http.NewResponseController(s.ResponseWriter).Flush()
			}
		}
		s.wrote = false
		s.mu.Unlock()
	}
}

// finish runs when the handler returns; after it no goroutine touches the
// ResponseWriter.
func (s *streamWriter) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if s.stop != nil {
		close(s.stop)
	}
}
