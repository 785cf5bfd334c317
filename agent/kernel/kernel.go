// Package kernel keeps language kernels alive inside the sandbox so state
// persists between calls, and serves them with the code interpreter's wire
// API (see shared/reference/e2b-wire.md, port 49999):
//
//	POST   /execute               NDJSON: stdout, stderr, result, error,
//	                              return_value, number_of_executions,
//	                              unexpected_end_of_execution, and always
//	                              last end_of_execution
//	POST   /contexts              {language, cwd} → {id, language, cwd}
//	GET    /contexts
//	POST   /contexts/{id}/restart
//	DELETE /contexts/{id}
//
// Kernels: python (python3), javascript (node) and shell (bash); clients
// may also say py, js, node, bash or sh. A context is one kernel process
// with its own state and cwd; the first
// execution in a language without a context_id uses (and creates) that
// language's default context. The drivers are small programs embedded in
// the binary and passed on the command line, so nothing is written inside
// the sandbox (the Python one may also come precompiled, read-only, from
// Options.ModuleDir); they speak JSON lines over their own pipes (fds 3 and 4).
// Kernels get the highest oom_score_adj, so the OOM killer takes user code
// before the agent.
//
// end_of_execution says how the cell ended, beyond its other events:
//
//	"timed_out": true   the request's timeout interrupted the cell
//	"restarted": true   the kernel is gone and its state with it: it was
//	                    killed after a timeout, restarted or deleted by
//	                    another request, or it exited or died (an error
//	                    event says which); the next call starts a fresh one
//
// Both are left out when false. Timeouts interrupt the cell (SIGINT →
// KeyboardInterrupt) and keep the state; a cell that does not stop within
// interruptGrace gets its kernel killed and restarted. A restart or a
// delete kills the kernel at once, even mid-cell: the running cell ends
// with an error saying so. A kernel that exits (sys.exit, process.exit,
// exit) or dies ends its cell at once with what it printed, a
// KernelExited (with the exit status) or KernelDied error, and
// unexpected_end_of_execution.
//
// A request cancelled while its cell runs (its client went away)
// interrupts the cell as a timeout does: the cell ran or it did not, and
// the state is kept. The SIGINT goes only to a cell that runs, between
// the driver's "started" event and its "done", and the drivers act on it
// only while a cell runs, so an interrupt never reaches an idle kernel
// or the next cell. A request cancelled before its cell started does not
// run it (ExecutionCancelled). If the kernel is lost during a call whose
// client had gone, the next call on the context reports it (the same
// error, "restarted") instead of running its cell.
//
// Everything a kernel sends is bounded, since user code can write to the
// drivers' pipes too: output past MaxOutputBytes per stream per execution
// is dropped; an event line longer than MaxEventBytes is skipped unread;
// results, errors and return values past MaxResultBytes in all are
// dropped; past MaxEvents events, output is merged into about one event a
// second per stream and other events are dropped. A note on stderr at the
// end says what was cut. Output that is not UTF-8 reaches JSON with each
// invalid run of bytes replaced by U+FFFD.
package kernel

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

//go:embed drivers/python.py
var pythonDriver string

//go:embed drivers/shell.sh
var shellDriver string

//go:embed drivers/javascript.js
var javascriptDriver string

// driver is how to start a language's kernel and frame a cell for it.
type driver struct {
	program string
	args    []string
	env     map[string]string
	encode  func(request) ([]byte, error)
}

var drivers = map[string]driver{
	// Python's args depend on Options.ModuleDir: see pythonArgs.
	"python": {program: "python3",
		env: map[string]string{"MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}, encode: encodeJSON},
	"javascript": {program: "node", args: []string{"-e", javascriptDriver}, encode: encodeJSON},
	"shell":      {program: "bash", args: []string{"--noprofile", "--norc", "-c", shellDriver}, encode: encodeShell},
}

// encodeJSON frames a cell as one JSON line (the Python and JavaScript
// drivers).
func encodeJSON(r request) ([]byte, error) {
	b, err := json.Marshal(r)
	return append(b, '\n'), err
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// encodeShell frames a cell as "marker NUL code NUL", with the request's
// environment exported first.
func encodeShell(r request) ([]byte, error) {
	if r.Event != nil {
		return nil, fmt.Errorf("handler mode needs python or javascript, not shell")
	}
	if strings.ContainsRune(r.Code, 0) {
		return nil, fmt.Errorf("shell code cannot contain a NUL byte")
	}
	var b strings.Builder
	b.WriteString(r.Marker + "\x00")
	for k, v := range r.Env {
		if !envName.MatchString(k) {
			return nil, fmt.Errorf("invalid environment variable name %q", k)
		}
		b.WriteString("export " + k + "='" + strings.ReplaceAll(v, "'", `'\''`) + "'\n")
	}
	b.WriteString(r.Code + "\n\x00")
	return []byte(b.String()), nil
}

// Options configure a Manager.
type Options struct {
	// UID and GID are the identity kernels run as.
	UID, GID int
	// Env is the kernels' base environment.
	Env map[string]string
	// Home is the default cwd of new contexts.
	Home string
	// MaxOutputBytes caps each stream of one execution; default 1 MiB.
	MaxOutputBytes int64
	// MaxEventBytes caps one event line from a kernel (a result with a
	// large image is one line); longer lines are skipped. Default 16 MiB.
	MaxEventBytes int64
	// MaxResultBytes caps the results, errors and return values of one
	// execution together, as sent; default 32 MiB.
	MaxResultBytes int64
	// MaxEvents caps the events a kernel sends in one execution, beyond
	// which output is merged and other events dropped; default 100000.
	MaxEvents int64
	// ModuleDir, if set, is where WritePythonModule put the Python driver,
	// as this process sees it; Python kernels start from it when it is there.
	ModuleDir string
	Logger    *slog.Logger
}

// Manager owns the contexts. It is safe for concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	// pythonArgs is how this manager starts Python kernels (ModuleDir's
	// contents do not change while it runs).
	pythonArgs []string

	mu       sync.Mutex
	contexts map[string]*kctx
	defaults map[string]*kctx // by language
}

// New returns a Manager.
func New(opts *Options) *Manager {
	m := &Manager{contexts: map[string]*kctx{}, defaults: map[string]*kctx{}}
	if opts != nil {
		m.opts = *opts
	}
	if m.opts.MaxOutputBytes <= 0 {
		m.opts.MaxOutputBytes = 1 << 20
	}
	if m.opts.MaxEventBytes <= 0 {
		m.opts.MaxEventBytes = 16 << 20
	}
	if m.opts.MaxResultBytes <= 0 {
		m.opts.MaxResultBytes = 32 << 20
	}
	if m.opts.MaxEvents <= 0 {
		m.opts.MaxEvents = 100000
	}
	if m.opts.Home == "" {
		m.opts.Home = "/"
	}
	m.pythonArgs = pythonArgs(m.opts.ModuleDir)
	m.log = m.opts.Logger
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

func (m *Manager) env(extra map[string]string) []string {
	env := maps.Clone(m.opts.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, extra)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// Close kills every kernel, ending the cells that run on them.
func (m *Manager) Close() {
	m.mu.Lock()
	ctxs := make([]*kctx, 0, len(m.contexts))
	for _, c := range m.contexts {
		ctxs = append(ctxs, c)
	}
	m.mu.Unlock()
	for _, c := range ctxs {
		c.stop(stopClose, true)
	}
}

// Prestart starts language's default context in the background, so the
// first execution finds its interpreter up. An execution that comes
// sooner waits for the start under way; a start that fails is retried,
// and reported, by the first execution.
func (m *Manager) Prestart(language string) error {
	c, err := m.resolve("", language)
	if err != nil {
		return err
	}
	go func() {
		c.cell.Lock()
		defer c.cell.Unlock()
		if _, err := c.kernel(); err != nil {
			m.log.Warn("prestart failed", "language", c.Language, "err", err)
		}
	}()
	return nil
}

// canonical maps the names clients use to a driver's name.
func canonical(language string) string {
	switch strings.ToLower(language) {
	case "", "python", "python3", "py":
		return "python"
	case "javascript", "js", "node", "nodejs":
		return "javascript"
	case "shell", "bash", "sh":
		return "shell"
	}
	return language
}

// create makes a context; its kernel starts on first use.
func (m *Manager) create(language, cwd string) (*kctx, error) {
	language = canonical(language)
	if _, ok := drivers[language]; !ok {
		return nil, fmt.Errorf("unsupported language %q: use python, javascript or shell", language)
	}
	if cwd == "" {
		cwd = m.opts.Home
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cwd %q is not a directory", cwd)
	}
	c := &kctx{ID: newID(), Language: language, Cwd: cwd, m: m}
	m.mu.Lock()
	m.contexts[c.ID] = c
	m.mu.Unlock()
	return c, nil
}

// Handler serves the code interpreter's routes.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute", m.handleExecute)
	mux.HandleFunc("POST /contexts", m.handleCreate)
	mux.HandleFunc("GET /contexts", m.handleList)
	mux.HandleFunc("POST /contexts/{id}/restart", m.handleRestart)
	mux.HandleFunc("DELETE /contexts/{id}", m.handleDelete)
	return mux
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
	Event     *json.RawMessage  `json:"event"`
	// Timeout in seconds; 0 means none beyond the request's own context.
	Timeout float64 `json:"timeout"`
}

func (m *Manager) handleExecute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	if !(req.Timeout >= 0) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout %g: give a number of seconds, or 0 for none", req.Timeout))
		return
	}
	if req.ContextID != "" && req.Language != "" {
		writeError(w, http.StatusBadRequest, "give context_id or language, not both: a context already has its language")
		return
	}
	c, err := m.resolve(req.ContextID, req.Language)
	if err != nil {
		status := http.StatusBadRequest
		if req.ContextID != "" {
			status = http.StatusNotFound
		}
		writeError(w, status, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	// Output streams as it comes. Results, errors and the count only come
	// at a cell's end, just before end_of_execution: they go out with it,
	// in one write instead of one each.
	var flush func()
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	c.execute(r.Context(), req.Code, req.EnvVars, req.Event, timeoutOf(req.Timeout), newReply(w, flush, &m.opts))
}

// timeoutOf converts a request's timeout in seconds; one too long to
// count in nanoseconds is none.
func timeoutOf(seconds float64) time.Duration {
	if seconds <= 0 || seconds >= float64(math.MaxInt64/time.Second) {
		return 0
	}
	return max(time.Duration(seconds*float64(time.Second)), 1)
}

// resolve finds the context an execution runs in.
func (m *Manager) resolve(id, language string) (*kctx, error) {
	if id != "" {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c := m.contexts[id]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("no context %q", id)
	}
	language = canonical(language)
	m.mu.Lock()
	c := m.defaults[language]
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := m.create(language, "")
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := m.defaults[language]; d != nil { // another request won the race
		delete(m.contexts, c.ID)
		return d, nil
	}
	m.defaults[language] = c
	return c, nil
}

func (m *Manager) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req struct{ Language, Cwd string }
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
			return
		}
	}
	c, err := m.create(req.Language, req.Cwd)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(c)
}

func (m *Manager) handleList(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	out := make([]*kctx, 0, len(m.contexts))
	for _, c := range m.contexts {
		out = append(out, c)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (m *Manager) lookup(w http.ResponseWriter, r *http.Request) *kctx {
	m.mu.Lock()
	c := m.contexts[r.PathValue("id")]
	m.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no context %q", r.PathValue("id")))
	}
	return c
}

// handleRestart kills the context's kernel, even mid-cell; the next
// execution starts a fresh one.
func (m *Manager) handleRestart(w http.ResponseWriter, r *http.Request) {
	c := m.lookup(w, r)
	if c == nil {
		return
	}
	c.stop(stopRestart, false)
	w.WriteHeader(http.StatusNoContent)
}

func (m *Manager) handleDelete(w http.ResponseWriter, r *http.Request) {
	c := m.lookup(w, r)
	if c == nil {
		return
	}
	m.mu.Lock()
	delete(m.contexts, c.ID)
	if m.defaults[c.Language] == c {
		delete(m.defaults, c.Language)
	}
	m.mu.Unlock()
	c.stop(stopDelete, true)
	w.WriteHeader(http.StatusNoContent)
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
