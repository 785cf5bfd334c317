package e2b

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

func (h *Handler) routes() {
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		h.mux.HandleFunc("POST "+p, h.create)
		h.mux.HandleFunc("GET "+p, h.list)
		h.mux.HandleFunc("POST "+p+"/{id}/connect", h.connect)
	}
	h.mux.HandleFunc("GET /sandboxes/{id}", h.get)
	h.mux.HandleFunc("DELETE /sandboxes/{id}", h.kill)
	h.mux.HandleFunc("POST /sandboxes/{id}/timeout", h.timeout)
	h.mux.HandleFunc("POST /sandboxes/{id}/refreshes", h.refresh)
	h.mux.HandleFunc("POST /sandboxes/{id}/pause", h.pause)
	h.mux.HandleFunc("POST /sandboxes/{id}/resume", h.resume)
	h.mux.HandleFunc("PUT /sandboxes/{id}/network", h.network)
	h.mux.HandleFunc("GET /sandboxes/{id}/metrics", h.metrics)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.Method+" "+r.URL.Path+" is not part of the E2B API mcpbox serves")
	})
}

// templateKey keeps, in a session's metadata, the E2B template id it was
// created with when that was an alias of the host template. It is never
// shown to E2B clients.
const templateKey = "mcpbox:e2b-template"

// Aliases of the default template: E2B's SDKs name them by default.
var defaultAliases = []string{"base", "code-interpreter-v1", "code-interpreter"}

// createBody is E2B's NewSandbox (v1) and NewSandboxV2. Fields the SDK
// may send that mcpbox cannot honour are refused when set, not ignored.
type createBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkBody      `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	VolumeMounts []json.RawMessage `json:"volumeMounts"`
	MCP          json.RawMessage   `json:"mcp"`
}

// networkBody is E2B's SandboxNetworkConfig, as far as egress goes.
type networkBody struct {
	AllowOut []string `json:"allowOut"`
	DenyOut  []string `json:"denyOut"`
}

// policy turns E2B's network fields into mcpbox's egress policy: nil
// when they say nothing (the server's default applies), an empty policy
// (no network) for allow_internet_access false.
func policy(allow *bool, n *networkBody) *mcpbox.NetworkPolicy {
	var p *mcpbox.NetworkPolicy
	if allow != nil {
		p = &mcpbox.NetworkPolicy{Public: *allow}
	}
	if n != nil && (len(n.AllowOut) > 0 || len(n.DenyOut) > 0) {
		if p == nil {
			p = &mcpbox.NetworkPolicy{}
		}
		// E2B's "all traffic" is 0.0.0.0/0: allowed, it is every public
		// address; denied, it is what a policy without Public already is.
		for _, a := range n.AllowOut {
			if a == allTraffic {
				p.Public = true
			} else {
				p.Allow = append(p.Allow, a)
			}
		}
		for _, d := range n.DenyOut {
			if d == allTraffic {
				p.Public = false
			} else {
				p.Deny = append(p.Deny, d)
			}
		}
	}
	return p
}

// allTraffic is the SDK's ALL_TRAFFIC selector.
const allTraffic = "0.0.0.0/0"

func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read the request body: "+err.Error())
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true // every field is optional
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "the request body is not the JSON this call takes: "+err.Error())
		return false
	}
	return true
}

// ttl turns E2B's whole seconds into a session TTL: the default when
// absent, capped by the server's maximum.
func (h *Handler) ttl(secs *int64) (time.Duration, error) {
	if secs == nil {
		return h.opts.DefaultTimeout, nil
	}
	if *secs <= 0 {
		return 0, mcpbox.Errorf(mcpbox.EINVALID, "timeout must be above 0 seconds, got %d", *secs)
	}
	d := time.Duration(min(*secs, int64(h.mgr.MaxTTL()/time.Second)+1)) * time.Second
	return min(d, h.mgr.MaxTTL()), nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var b createBody
	if !h.decode(w, r, &b) {
		return
	}
	switch {
	case len(b.MCP) > 0 && string(b.MCP) != "null":
		writeError(w, http.StatusBadRequest, "the mcp option (E2B's MCP gateway) is not supported: run MCP servers through mcpbox's own MCP endpoint")
		return
	case len(b.VolumeMounts) > 0:
		writeError(w, http.StatusBadRequest, "volumeMounts are not supported: mcpbox maps host directories from its configuration (volumes)")
		return
	case b.AutoResume != nil && b.AutoResume.Enabled:
		writeError(w, http.StatusBadRequest, "autoResume is not supported: resume a paused sandbox with Sandbox.connect")
		return
	}
	ttl, err := h.ttl(b.Timeout)
	if err != nil {
		writeDomainError(w, err)
		return
	}
	tpl := b.TemplateID
	if tpl == "" {
		tpl = "base"
	}
	req := manager.CreateRequest{
		Template: tpl, Env: b.EnvVars, Metadata: b.Metadata, TTL: ttl,
		// An E2B sandbox lives until its timeout, used or not: an idle
		// timeout as long as the longest TTL never ends it first.
		IdleTimeout:  h.mgr.MaxTTL(),
		Network:      policy(b.AllowInternetAccess, b.Network),
		EnvInSandbox: true,
		AutoPause:    b.AutoPause != nil && *b.AutoPause,
	}
	delete(req.Metadata, templateKey)
	s, err := h.mgr.Create(r.Context(), ownerOf(r), req)
	if err != nil && slices.Contains(defaultAliases, tpl) && isUnknownTemplate(err) {
		// No template system knows the alias: it is the host template.
		req.Template = ""
		if tpl != "base" {
			req.Metadata = withKey(req.Metadata, templateKey, tpl)
		}
		s, err = h.mgr.Create(r.Context(), ownerOf(r), req)
	}
	if err != nil {
		if isUnknownTemplate(err) {
			msg := fmt.Sprintf("template %q not found (%v)", tpl, err)
			if sug := mcpbox.ErrorSuggestions(err); len(sug) > 0 {
				msg += ": " + strings.Join(sug, "; ")
			}
			writeError(w, http.StatusNotFound, msg)
			return
		}
		writeDomainError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandbox(s))
}

func isUnknownTemplate(err error) bool {
	return mcpbox.ErrorCode(err) == mcpbox.EINVALID && strings.Contains(err.Error(), "template")
}

func withKey(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// sandboxJSON is E2B's Sandbox: what create, connect and resume return.
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// clientID is a field E2B's API still carries and its SDKs ignore.
const clientID = "mcpbox"

func (h *Handler) sandbox(s *mcpbox.Session) sandboxJSON {
	tok := h.AccessToken(s.Owner, s.ID)
	// The traffic token is the same secret: the code interpreter sends it
	// (E2B-Traffic-Access-Token) on the calls where it sends no access
	// token (/contexts).
	return sandboxJSON{SandboxID: s.ID, TemplateID: templateOf(s), ClientID: clientID,
		EnvdVersion: mcpbox.EnvdVersion, EnvdAccessToken: tok, TrafficAccessToken: tok}
}

func templateOf(s *mcpbox.Session) string {
	if s.Template != "" {
		return s.Template
	}
	if t := s.Metadata[templateKey]; t != "" {
		return t
	}
	return "base"
}

// infoJSON is E2B's SandboxDetail and ListedSandbox.
type infoJSON struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	VolumeMounts    []any             `json:"volumeMounts"`
	Lifecycle       lifecycleJSON     `json:"lifecycle"`
}

// lifecycleJSON is what happens at the timeout: "kill", or "pause" for a
// sandbox created with autoPause.
type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

func (h *Handler) info(s *mcpbox.Session, token bool) infoJSON {
	md := map[string]string{}
	for k, v := range s.Metadata {
		if k != templateKey {
			md[k] = v
		}
	}
	end := s.Deadline()
	if s.State == mcpbox.SessionPaused {
		// Paused time does not count: the timeout resumes where it was.
		end = s.Deadline().Add(time.Since(s.PausedAt))
	}
	i := infoJSON{SandboxID: s.ID, TemplateID: templateOf(s), ClientID: clientID, StartedAt: s.Created.UTC(), EndAt: end.UTC(),
		State: e2bState(s.State), CPUCount: max(1, int(s.Flavor.CPUs)), MemoryMB: s.Flavor.MemoryBytes >> 20,
		DiskSizeMB: s.Flavor.DiskBytes >> 20, Metadata: md, EnvdVersion: mcpbox.EnvdVersion, VolumeMounts: []any{},
		Lifecycle: lifecycleJSON{OnTimeout: "kill"}}
	if s.AutoPause {
		i.Lifecycle.OnTimeout = "pause"
	}
	if token {
		i.EnvdAccessToken = h.AccessToken(s.Owner, s.ID)
	}
	return i
}

// e2bState is E2B's name of a session state; "" for one E2B does not
// show (a sandbox that has ended is not found).
func e2bState(st mcpbox.SessionState) string {
	switch st {
	case mcpbox.SessionRunning:
		return "running"
	case mcpbox.SessionPaused:
		return "paused"
	}
	return ""
}

// lookup returns owner's sandbox id while it exists for E2B: running or
// paused. Anything else answers 404 with code 404, which the SDK reads as
// SandboxNotFoundError.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) (*mcpbox.Session, bool) {
	id := r.PathValue("id")
	s, err := h.mgr.Get(r.Context(), ownerOf(r), id)
	if err == nil && e2bState(s.State) == "" {
		err = mcpbox.SessionNotFound(id)
	}
	if err != nil {
		if mcpbox.ErrorCode(err) == mcpbox.ESESSION {
			writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id))
		} else {
			writeDomainError(w, err)
		}
		return nil, false
	}
	return s, true
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	if s, ok := h.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, h.info(s, true))
	}
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if err := h.mgr.Stop(r.Context(), ownerOf(r), s.ID); err != nil {
		writeDomainError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

func (h *Handler) timeout(w http.ResponseWriter, r *http.Request) {
	var b timeoutBody
	if !h.decode(w, r, &b) {
		return
	}
	if b.Timeout == nil {
		writeError(w, http.StatusBadRequest, `the body is {"timeout": <seconds>}`)
		return
	}
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	d, err := h.ttl(b.Timeout)
	if err == nil {
		err = h.mgr.SetTimeout(r.Context(), ownerOf(r), s.ID, d)
	}
	if err != nil {
		writeDomainError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh keeps a sandbox alive for duration seconds more, if that is
// later than its end (E2B's keep-alive).
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Duration *int64 `json:"duration"`
	}
	if !h.decode(w, r, &b) {
		return
	}
	if b.Duration == nil {
		b.Duration = new(int64(60))
	}
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if err := h.extend(r, s, b.Duration); err != nil {
		writeDomainError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// extend sets s's timeout to secs from now when that ends it later than
// it would end now; never earlier.
func (h *Handler) extend(r *http.Request, s *mcpbox.Session, secs *int64) error {
	if secs == nil {
		return nil
	}
	d, err := h.ttl(secs)
	if err != nil {
		return err
	}
	if !time.Now().Add(d).After(s.Deadline()) {
		return nil
	}
	return h.mgr.SetTimeout(r.Context(), ownerOf(r), s.ID, d)
}

type connectBody struct {
	Timeout *int64 `json:"timeout"`
}

// connect hands out a sandbox's connection details, resuming it when it
// is paused: 200 when it was running, 201 when it was resumed.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	var b connectBody
	if !h.decode(w, r, &b) {
		return
	}
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	status := http.StatusOK
	if s.State == mcpbox.SessionPaused {
		resumed, err := h.mgr.Resume(r.Context(), ownerOf(r), s.ID)
		switch {
		case mcpbox.ErrorCode(err) == mcpbox.ECONFLICT && resumed != nil:
			// Another connect resumed it first: it is running.
			s = resumed
		case err != nil:
			writeDomainError(w, err)
			return
		default:
			s, status = resumed, http.StatusCreated
		}
	}
	if status == http.StatusCreated {
		if b.Timeout == nil {
			// A sandbox paused at its timeout (autoPause) resumes with
			// the default one, not with none left.
			b.Timeout = new(int64(h.opts.DefaultTimeout / time.Second))
		}
	}
	if err := h.extend(r, s, b.Timeout); err != nil {
		writeDomainError(w, err)
		return
	}
	writeJSON(w, status, h.sandbox(s))
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if s.State == mcpbox.SessionPaused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", s.ID))
		return
	}
	if _, err := h.mgr.Pause(r.Context(), ownerOf(r), s.ID); err != nil {
		writeDomainError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resume is E2B's older POST /sandboxes/{id}/resume: 409 when running.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	var b connectBody
	if !h.decode(w, r, &b) {
		return
	}
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if s.State != mcpbox.SessionPaused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is already running", s.ID))
		return
	}
	s, err := h.mgr.Resume(r.Context(), ownerOf(r), s.ID)
	if b.Timeout == nil {
		b.Timeout = new(int64(h.opts.DefaultTimeout / time.Second))
	}
	if err == nil {
		err = h.extend(r, s, b.Timeout)
	}
	if err != nil {
		writeDomainError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandbox(s))
}

func (h *Handler) network(w http.ResponseWriter, r *http.Request) {
	var b struct {
		networkBody
		AllowInternetAccess *bool `json:"allow_internet_access"`
	}
	if !h.decode(w, r, &b) {
		return
	}
	s, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if err := h.setNetwork(r, s, policy(b.AllowInternetAccess, &b.networkBody)); err != nil {
		writeDomainError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, []any{})
	}
}

// --- list ---

// maxPage is the most sandboxes one page of a list holds.
const maxPage = 1000

// list serves v1 (all of them) and v2 (paged with limit and nextToken,
// the next token in the x-next-token header). Filters: state (comma
// separated; default running and paused), metadata (a URL-encoded query
// string of pairs that must all match) and template.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	states := []mcpbox.SessionState{mcpbox.SessionRunning, mcpbox.SessionPaused}
	if v := q["state"]; len(v) > 0 {
		states = nil
		for _, part := range strings.Split(strings.Join(v, ","), ",") {
			switch strings.TrimSpace(part) {
			case "running":
				states = append(states, mcpbox.SessionRunning)
			case "paused":
				states = append(states, mcpbox.SessionPaused)
			case "":
			default:
				writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q: use running or paused", part))
				return
			}
		}
	}
	f := mcpbox.SessionFilter{States: states}
	if md := q.Get("metadata"); md != "" {
		pairs, err := url.ParseQuery(md)
		if err != nil {
			writeError(w, http.StatusBadRequest, "metadata is not a URL-encoded query string: "+err.Error())
			return
		}
		f.Metadata = map[string]string{}
		for k, v := range pairs {
			// The SDK encodes each key and value before joining them.
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(v[len(v)-1])
			if err1 != nil || err2 != nil {
				key, val = k, v[len(v)-1]
			}
			f.Metadata[key] = val
		}
	}
	limit := maxPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: use a whole number above 0", v))
			return
		}
		limit = min(n, maxPage)
	}
	after, err := decodeCursor(q.Get("nextToken"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "nextToken is not one this server gave: "+err.Error())
		return
	}
	all, err := h.mgr.List(r.Context(), ownerOf(r), f)
	if err != nil {
		writeDomainError(w, err)
		return
	}
	tpl := q.Get("template")
	slices.SortFunc(all, func(a, b *mcpbox.Session) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := []infoJSON{}
	next := ""
	for _, s := range all {
		if tpl != "" && templateOf(s) != tpl && (s.Template == "" || mcpbox.TemplateAliases[tpl] != s.Template) {
			continue
		}
		if after != nil && !after.before(s) {
			continue
		}
		if len(out) == limit {
			next = pageToken(out[len(out)-1])
			break
		}
		out = append(out, h.info(s, false))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// cursor is a position in the list: sessions after (created, id).
type cursor struct {
	created time.Time
	id      string
}

func (c *cursor) before(s *mcpbox.Session) bool {
	if d := c.created.Compare(s.Created); d != 0 {
		return d < 0
	}
	return c.id < s.ID
}

// pageToken is the nextToken of a page whose last sandbox is last: the
// next page starts after it.
func pageToken(last infoJSON) string {
	return base64.RawURLEncoding.EncodeToString([]byte(last.StartedAt.Format(time.RFC3339Nano) + "|" + last.SandboxID))
}

func decodeCursor(tok string) (*cursor, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, err
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok {
		return nil, errors.New("malformed")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, err
	}
	return &cursor{t, id}, nil
}
