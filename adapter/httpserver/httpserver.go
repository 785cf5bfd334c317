// Package httpserver is mcpbox's HTTP front: MCP over Streamable HTTP
// (/mcp) and legacy SSE (/sse), health and readiness, Prometheus metrics,
// API-key authentication, and the Origin and Host checks that keep
// browsers and DNS rebinding out.
package httpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/apikey"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/manager"
)

// Options configure the handler. MCP and Manager are required.
type Options struct {
	MCP     *mcpserver.Server
	Manager *manager.Manager
	// Keys authenticates callers. While it holds no live key, every
	// caller is the local owner (serve refuses non-loopback addresses
	// then, unless told --insecure).
	Keys mcpbox.KeyStore
	// Version and Runtime are reported by /healthz.
	Version, Runtime string
	// CORSOrigins may call from a browser; any other Origin gets 403.
	CORSOrigins []string
	// MaxBodyBytes caps a request body; default 64 MiB.
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's headers; default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, counted from the end
	// of its headers; default 1 minute. A client slower than
	// MaxBodyBytes/BodyTimeout cannot send the largest body. Responses
	// are not bounded: tool calls and event streams run long.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle for this long
	// between requests; default 2 minutes.
	IdleTimeout time.Duration
	// StreamKeepAlive is how long an event stream may stay quiet before
	// it gets a keepalive comment; default 30 s.
	StreamKeepAlive time.Duration
	// MaxConns bounds the open connections of [Handler.Listener]; default
	// 1024. Each SSE or Streamable HTTP stream holds one.
	MaxConns int
	// Registry receives the metrics; nil makes a new one.
	Registry *prometheus.Registry
	// Hosted, when set, serves the hosted MCP servers at /v1/servers
	// (hosted.go).
	Hosted *hosted.Hosts
	Logger *slog.Logger
}

// Handler serves every HTTP endpoint of mcpbox.
type Handler struct {
	opts    Options
	mux     *http.ServeMux
	metrics *Metrics
	log     *slog.Logger

	keys apikey.Presence

	sse sseSessions
}

// New returns the handler. Its Metrics must be hooked into the MCP server
// (mcpserver.Options.OnCall) by the caller, which builds both.
func New(opts Options) *Handler {
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	opts.withConnDefaults()
	h := &Handler{opts: opts, mux: http.NewServeMux(), log: opts.Logger, sse: sseSessions{m: map[string]*sseSession{}}}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.metrics = newMetrics(opts.Registry, opts.Manager)

	getServer := func(r *http.Request) *mcp.Server { return opts.MCP.For(ownerOf(r)) }
	stateful := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		// An MCP session only binds a client to a connection; sandboxes
		// live in mcpbox sessions. Idle connections are let go.
		SessionTimeout: 30 * time.Minute,
		Logger:         h.log,
	})
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, MaxRequestBodyBytes: opts.MaxBodyBytes, Logger: h.log,
		PropagateRequestCancellation: true,
	})
	// 2026-07-28 clients send no initialize and no session: each POST
	// stands alone. Older clients get the stateful handler.
	streamable := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") == "" && r.Header.Get("MCP-Protocol-Version") >= "2026-07-28" {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
	guard := func(next http.Handler) http.Handler { return h.checkHost(h.cors(h.authenticate(next))) }
	h.mux.Handle("/mcp", guard(keepStreamAlive(streamable, opts.StreamKeepAlive)))
	h.mux.Handle("/sse", guard(keepStreamAlive(http.HandlerFunc(h.serveSSE), opts.StreamKeepAlive)))
	// Probes stay open: a load balancer or kubelet has no key. /healthz
	// tells an anonymous caller no counts once keys exist (see health).
	h.mux.HandleFunc("GET /{$}", h.health)
	h.mux.HandleFunc("GET /healthz", h.health)
	h.mux.HandleFunc("GET /readyz", h.ready)
	// Metrics count sessions, calls and errors of every owner: with keys,
	// a scraper needs one like any other caller.
	h.mux.Handle("GET /metrics", guard(promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})))
	h.routeHosted(guard)
	return h
}

// Metrics returns the handler's metrics, for mcpserver.Options.OnCall.
func (h *Handler) Metrics() *Metrics { return h.metrics }

// ServeHTTP bounds the request's body in time and routes it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	limitBody(w, r, h.opts.BodyTimeout)
	h.mux.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// health is open to every caller, but once keys exist only a caller with
// one learns how many sessions are live.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"status": "ok", "version": h.opts.Version, "runtime": h.opts.Runtime}
	if !h.keysConfigured(r.Context()) || h.hasKey(r) {
		body["sessions"] = h.opts.Manager.LiveSessions()
	}
	writeJSON(w, http.StatusOK, body)
}

// ready answers 200 once the store answers; a load balancer sends no
// traffic before.
func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.opts.Manager.Ready(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready"})
}

// --- owners and keys ---

func ownerOf(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && ti.UserID != "" {
		return ti.UserID
	}
	return mcpbox.LocalOwner
}

// authenticate resolves the caller's key to its owner. A key goes in
// Authorization: Bearer or X-API-Key. With no live key in the store,
// callers are the local owner. Every refusal, a missing key or a bad one,
// is a 401 with the same JSON body (mcpserver.ToolError's shape), so a
// client reads one kind of answer.
func (h *Handler) authenticate(next http.Handler) http.Handler {
	// The key was checked before bearer runs (see below); verify only
	// hands bearer the owner found, so the SDK's TokenInfo carries it.
	verify := func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		k, _ := r.Context().Value(keyCtx{}).(*mcpbox.APIKey)
		if k == nil {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: k.Owner}, nil
	}
	bearer := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		if k := r.Header.Get("X-API-Key"); k != "" && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+k)
		}
		authz := r.Header.Get("Authorization")
		if authz == "" {
			if !h.keysConfigured(r.Context()) {
				next.ServeHTTP(w, r)
				return
			}
			unauthorized(w, "this server requires an API key, and the request carries none",
				"send it as Authorization: Bearer <key> or X-API-Key: <key>; an operator creates one with `mcpbox key create --owner NAME`")
			return
		}
		scheme, token, _ := strings.Cut(strings.TrimSpace(authz), " ")
		token = strings.TrimSpace(token)
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			unauthorized(w, "the Authorization header must be \"Bearer <key>\"",
				"send the key as Authorization: Bearer <key> or X-API-Key: <key>")
			return
		}
		k, err := apikey.Authenticate(r.Context(), h.opts.Keys, token)
		if err != nil {
			if mcpbox.ErrorCode(err) != mcpbox.EUNAUTH {
				h.log.Error("authenticate", "err", err)
				writeJSON(w, http.StatusServiceUnavailable, mcpserver.ToolError{ErrorCode: mcpbox.EUNAVAILABLE, Category: "server", Severity: "error",
					Message: "the server could not check the API key", RecoverySuggestions: []string{"retry in a moment"}, Context: map[string]any{}})
				return
			}
			unauthorized(w, "the API key was refused: it is unknown or has been revoked",
				"ask an operator for a live key (`mcpbox key list` shows which exist; `mcpbox key create --owner NAME` makes one)")
			return
		}
		r.Header.Set("Authorization", "Bearer "+token)
		bearer.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, k)))
	})
}

// keyCtx carries the key authenticate found to bearer's verify.
type keyCtx struct{}

// unauthorized answers 401 with the body every refusal has.
func unauthorized(w http.ResponseWriter, message, suggestion string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="mcpbox"`)
	writeError(w, http.StatusUnauthorized, mcpbox.EUNAUTH, message, suggestion)
}

// writeError answers with the JSON body a tool error has
// (mcpserver.ToolError), so every refusal on every path reads alike.
func writeError(w http.ResponseWriter, status int, code, message, suggestion string) {
	category := map[string]string{mcpbox.EUNAUTH: "auth", mcpbox.ENOTFOUND: "input", mcpbox.EUNSUPPORTED: "input"}[code]
	if category == "" {
		category = "server"
	}
	writeJSON(w, status, mcpserver.ToolError{ErrorCode: code, Category: category, Severity: "error",
		Message: message, RecoverySuggestions: []string{suggestion}, Context: map[string]any{}})
}

// hasKey reports whether r carries a live key, in either header.
func (h *Handler) hasKey(r *http.Request) bool {
	token := r.Header.Get("X-API-Key")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		token = b
	}
	if token == "" || h.opts.Keys == nil {
		return false
	}
	_, err := apikey.Authenticate(r.Context(), h.opts.Keys, token)
	return err == nil
}

// keysConfigured reports whether any live key exists (apikey.Presence).
func (h *Handler) keysConfigured(ctx context.Context) bool {
	return h.keys.Any(ctx, h.opts.Keys)
}

// --- browsers and DNS rebinding ---

// checkHost refuses a non-loopback Host on a loopback connection: that is
// a DNS-rebinding page in a browser, not a real client.
func (h *Handler) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && isLoopback(la.String()) && !isLoopback(r.Host) {
			writeError(w, http.StatusForbidden, mcpbox.EUNAUTH, "Host "+r.Host+" is not this server: a loopback listener answers only loopback names (a browser page reaching it through another name is DNS rebinding)",
				"call it as http://127.0.0.1:PORT or http://localhost:PORT, or listen on another address with --host")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// cors refuses foreign origins with 403 and answers allowed ones with the
// CORS headers browsers need, preflights included. Clients outside a
// browser send no Origin and pass.
func (h *Handler) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !h.originAllowed(origin, r.Host) {
			writeError(w, http.StatusForbidden, mcpbox.EUNAUTH, "Origin "+origin+" may not call this server",
				"an operator can allow it with --cors-origin "+origin+" (or cors_origins in the config)")
			return
		}
		hd := w.Header()
		hd.Set("Access-Control-Allow-Origin", origin)
		hd.Add("Vary", "Origin")
		hd.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate")
		if r.Method == http.MethodOptions {
			hd.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
			hd.Set("Access-Control-Allow-Headers", "Authorization, X-API-Key, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name")
			hd.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) originAllowed(origin, host string) bool {
	if slices.ContainsFunc(h.opts.CORSOrigins, func(o string) bool { return strings.EqualFold(strings.TrimSuffix(o, "/"), origin) }) {
		return true
	}
	// A page served by this very server is same-origin.
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// --- legacy SSE ---

// sseSession is one SSE connection and the owner who opened it.
type sseSession struct {
	t     *mcp.SSEServerTransport
	owner string
	ready chan struct{} // closed once the transport is connected
}

type sseSessions struct {
	mu sync.Mutex
	m  map[string]*sseSession
}

// serveSSE is the 2024-11-05 HTTP+SSE transport. It is go-sdk's
// SSEHandler plus one thing that handler lacks: a message is accepted
// only from the owner who opened the stream, so a leaked session id is
// useless under another key.
func (h *Handler) serveSSE(w http.ResponseWriter, r *http.Request) {
	owner := ownerOf(r)
	switch r.Method {
	case http.MethodPost:
		id := r.URL.Query().Get("sessionid")
		h.sse.mu.Lock()
		s := h.sse.m[id]
		h.sse.mu.Unlock()
		if s == nil || s.owner != owner {
			writeError(w, http.StatusNotFound, mcpbox.ENOTFOUND, "no SSE stream with this sessionid is open for this caller",
				"open the stream with GET /sse first and post to the endpoint its first event names")
			return
		}
		select {
		case <-s.ready:
		case <-r.Context().Done():
			return
		}
		s.t.ServeHTTP(w, r)
	case http.MethodGet:
		id := rand.Text()
		s := &sseSession{owner: owner, ready: make(chan struct{}),
			t: &mcp.SSEServerTransport{Endpoint: r.URL.Path + "?sessionid=" + id, Response: w, MaxRequestBodyBytes: h.opts.MaxBodyBytes}}
		h.sse.mu.Lock()
		h.sse.m[id] = s
		h.sse.mu.Unlock()
		defer func() {
			h.sse.mu.Lock()
			delete(h.sse.m, id)
			h.sse.mu.Unlock()
		}()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		ss, err := h.opts.MCP.For(owner).Connect(r.Context(), s.t, nil)
		if err != nil {
			writeError(w, http.StatusInternalServerError, mcpbox.EINTERNAL, "the MCP connection could not be set up", "retry; if it keeps failing, report it with the server's log")
			return
		}
		close(s.ready)
		defer ss.Close()
		done := make(chan struct{})
		go func() { ss.Wait(); close(done) }()
		select {
		case <-r.Context().Done():
		case <-done:
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, mcpbox.EUNSUPPORTED, r.Method+" is not allowed on /sse", "GET /sse opens a stream; POST sends a message to it")
	}
}
