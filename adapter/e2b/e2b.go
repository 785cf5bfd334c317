// Package e2b serves E2B's API over mcpbox's sessions, so that unmodified
// E2B SDKs (npm e2b 2.51, @e2b/code-interpreter 2.8) run against
// `mcpbox serve` with E2B_API_URL and E2B_SANDBOX_URL pointed at it.
//
// It has two planes on the one listener MCP is served on:
//
//   - the control plane (sandboxes.go): create, get, list, kill,
//     timeout, connect, pause and resume, authenticated by X-API-Key with
//     mcpbox's own keys. A sandbox is a session of the key's owner, the
//     same one MCP's get_sessions shows.
//   - the data plane (dataplane.go): every request carrying an
//     E2b-Sandbox-Id header, or a Host of the form <port>-<id>.<domain>,
//     is forwarded unchanged to that sandbox's agent (which speaks envd's
//     protocol and the code interpreter's) through the manager's one door,
//     streamed and flushed chunk by chunk. It is authenticated by the
//     sandbox's access token (token.go), not by an API key: that is what
//     the SDKs send.
//
// The data plane is chosen before any other routing (Wrap), because its
// paths (/health, /files, /execute …) are the sandbox's, not mcpbox's.
package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/apikey"
	"github.com/mcpbox/mcpbox/manager"
)

// Options configure a Handler. Manager and Secret are required.
type Options struct {
	Manager *manager.Manager
	// Keys authenticates the control plane. While it holds no live key,
	// every caller is the local owner, whatever key the SDK sends (it
	// always sends one).
	Keys mcpbox.KeyStore
	// Secret signs the sandboxes' access tokens (see LoadSecret). Every
	// process sharing a home must use the same one.
	Secret []byte
	// DefaultTimeout is a sandbox's life when create names none; default
	// 300 s, what the SDK used to send.
	DefaultTimeout time.Duration
	// MaxBodyBytes caps a control-plane request body; default 1 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds reading a request body; default 10 minutes (a
	// data-plane upload may be large).
	BodyTimeout time.Duration
	Logger      *slog.Logger
}

// Handler serves both planes.
type Handler struct {
	opts Options
	mgr  *manager.Manager
	log  *slog.Logger
	mux  *http.ServeMux

	keys apikey.Presence
}

// New returns a Handler.
func New(opts Options) (*Handler, error) {
	if opts.Manager == nil {
		return nil, errors.New("e2b: a Manager is required")
	}
	if len(opts.Secret) < 16 {
		return nil, errors.New("e2b: a secret of at least 16 bytes is required to sign access tokens")
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 300 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 10 * time.Minute
	}
	h := &Handler{opts: opts, mgr: opts.Manager, log: opts.Logger, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.routes()
	return h, nil
}

// Wrap returns a handler that serves E2B's data plane and control plane
// and passes everything else to next.
func (h *Handler) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, port, ok := dataPlaneTarget(r); ok {
			h.limitBody(w, r)
			h.serveData(w, r, id, port)
			return
		}
		if IsControlPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsControlPath reports whether path belongs to E2B's control plane.
func IsControlPath(path string) bool {
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// ServeHTTP serves the control plane.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(w, r) {
		return
	}
	h.limitBody(w, r)
	owner, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), ownerKey{}, owner))
	h.mux.ServeHTTP(w, r)
}

type ownerKey struct{}

func ownerOf(r *http.Request) string {
	o, _ := r.Context().Value(ownerKey{}).(string)
	return o
}

// limitBody gives a request body a read deadline, so a client that never
// sends it does not hold a connection for ever.
func (h *Handler) limitBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
}

// sameOrigin refuses what a browser page on another site, or one reached
// by DNS rebinding, sends: an Origin that is not this host, or a
// non-loopback Host on a loopback listener. SDKs outside a browser send
// neither.
func (h *Handler) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && isLoopback(la.String()) && !isLoopback(r.Host) {
		writeError(w, http.StatusForbidden, "Host "+r.Host+" is not this server")
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			writeError(w, http.StatusForbidden, "Origin "+o+" may not call this server")
			return false
		}
	}
	return true
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

// authenticate resolves the caller's key (X-API-Key, or Authorization:
// Bearer) to its owner, or answers 401.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !h.keysConfigured(r.Context()) {
		return mcpbox.LocalOwner, true
	}
	key := r.Header.Get("X-Api-Key")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && key == "" {
		key = b
	}
	if key == "" {
		writeError(w, http.StatusUnauthorized, "this server requires an API key: send it as X-API-Key (E2B_API_KEY); an operator creates one with `mcpbox key create --owner NAME`")
		return "", false
	}
	k, err := apikey.Authenticate(r.Context(), h.opts.Keys, key)
	if err != nil {
		if mcpbox.ErrorCode(err) == mcpbox.EUNAUTH {
			writeError(w, http.StatusUnauthorized, "the API key is unknown or revoked")
		} else {
			writeDomainError(w, err)
		}
		return "", false
	}
	return k.Owner, true
}

// keysConfigured reports whether any live key exists (apikey.Presence).
func (h *Handler) keysConfigured(ctx context.Context) bool {
	return h.keys.Any(ctx, h.opts.Keys)
}

// apiError is E2B's error body. The SDK tells a missing sandbox by
// code 404 in the body, not by the status alone.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// writeDomainError maps an mcpbox error to E2B's statuses.
func writeDomainError(w http.ResponseWriter, err error) {
	status := map[string]int{
		mcpbox.EINVALID:     http.StatusBadRequest,
		mcpbox.ENOTFOUND:    http.StatusNotFound,
		mcpbox.ESESSION:     http.StatusNotFound,
		mcpbox.ELIMIT:       http.StatusTooManyRequests,
		mcpbox.EUNAUTH:      http.StatusUnauthorized,
		mcpbox.EUNSUPPORTED: http.StatusBadRequest,
		mcpbox.EUNAVAILABLE: http.StatusServiceUnavailable,
		mcpbox.ECONFLICT:    http.StatusConflict,
		mcpbox.ETIMEOUT:     http.StatusGatewayTimeout,
	}[mcpbox.ErrorCode(err)]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	msg := err.Error()
	if s := mcpbox.ErrorSuggestions(err); len(s) > 0 {
		msg += " (" + strings.Join(s, "; ") + ")"
	}
	writeError(w, status, msg)
}
