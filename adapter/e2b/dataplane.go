package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strings"

	"github.com/mcpbox/mcpbox"
)

// The agent serves envd's port and the code interpreter's on one
// listener; these are the only ports of a sandbox the data plane reaches.
const (
	envdPort        = "49983"
	interpreterPort = "49999"
)

// hostPattern is the first label of a host name that routes to a
// sandbox: <port>-<id>, as in 49983-<id>.sandbox.example.com.
var hostPattern = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{1,63})$`)

// dataPlaneTarget tells a data-plane request and the sandbox and port it
// is for: by the E2b-Sandbox-Id header (with E2B_SANDBOX_URL, one host
// for every sandbox), or else by a Host of the form <port>-<id>.<domain>
// (behind a TLS-terminating proxy with wildcard DNS).
func dataPlaneTarget(r *http.Request) (id, port string, ok bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port := r.Header.Get("E2b-Sandbox-Port")
		if port == "" {
			port = envdPort
		}
		return id, port, true
	}
	host := r.Host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	label, rest, dot := strings.Cut(host, ".")
	if !dot || rest == "" {
		return "", "", false
	}
	m := hostPattern.FindStringSubmatch(strings.ToLower(label))
	if m == nil {
		return "", "", false
	}
	return m[2], m[1], true
}

// defaultUser is envd's Authorization for the user "user".
var defaultUser = "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"))

// hopHeaders are E2B's routing and credential headers: they stop here and
// never reach the sandbox.
var hopHeaders = []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Access-Token", "E2b-Traffic-Access-Token", "X-Api-Key"}

// serveData forwards one request to sandbox id's agent through the
// manager's door, unchanged but for E2B's own headers, streaming both
// bodies and flushing every chunk as it comes (process output, NDJSON
// lines, keepalives).
//
// A sandbox that is gone, paused, unknown or another owner's is 502, as
// E2B's proxy answers: the SDK's isRunning() is false on 502 only.
func (h *Handler) serveData(w http.ResponseWriter, r *http.Request, id, port string) {
	if port != envdPort && port != interpreterPort {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("port %s of sandbox %s is not served: mcpbox forwards envd (%s) and the code interpreter (%s) only", port, id, envdPort, interpreterPort))
		return
	}
	token := r.Header.Get("X-Access-Token")
	if token == "" {
		token = r.Header.Get("E2b-Traffic-Access-Token")
	}
	if token == "" {
		writeError(w, http.StatusUnauthorized, "no access token: send the sandbox's envdAccessToken as X-Access-Token")
		return
	}
	owner, ok := h.checkToken(token, id)
	if !ok {
		writeError(w, http.StatusUnauthorized, "the access token is not this sandbox's")
		return
	}
	rt, err := h.mgr.Agent(r.Context(), owner, id)
	if err != nil {
		if mcpbox.ErrorCode(err) == mcpbox.ESESSION {
			writeError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s is not running: %v", id, err))
			return
		}
		writeDomainError(w, err)
		return
	}
	proxy := &httputil.ReverseProxy{
		Transport:     rt,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "agent", "agent"
			for _, k := range hopHeaders {
				pr.Out.Header.Del(k)
			}
			// Basic "user:" names envd's user; anything else (a bearer
			// API key sent by mistake) is a credential the sandbox has no
			// business seeing.
			if a := pr.Out.Header.Get("Authorization"); a != "" && !strings.HasPrefix(a, "Basic ") {
				pr.Out.Header.Del("Authorization")
			}
			// The SDK names no user for the default one; envd then acts
			// as "user", starting commands in its home. Named, the agent
			// does the same (unnamed, it starts them in /workspace, as
			// MCP's tools expect).
			if pr.Out.Header.Get("Authorization") == "" {
				pr.Out.Header.Set("Authorization", defaultUser)
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away; nobody to tell
			}
			h.log.Debug("e2b data plane", "session", id, "path", r.URL.Path, "err", err)
			writeError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s did not answer: %v", id, err))
		},
	}
	proxy.ServeHTTP(w, r)
}
