// Package hosted runs third-party MCP servers — filesystem, git, memory,
// anything that speaks MCP over stdio — each in a sandbox of its own,
// and calls their tools: the Go API behind `mcpbox server`, `mcpbox
// tools`, `mcpbox quick`, the gateway on mcpbox's MCP endpoint and the
// /v1/servers REST routes.
//
// A definition (Server, e2b-mcp's fields plus mcpbox's) lives in
// servers.json, shared by every mcpbox process of a user. A server starts
// on first use: a session is created for it (one per owner, or one for
// everyone when its scope is shared), its install commands run, its
// command starts through the agent's process stream (manager.StartStdio)
// with its env in the start request, and mcpbox does the MCP initialize
// handshake — no sleeps — and lists its tools, following pagination and
// list_changed. Calls are multiplexed on the one connection, with
// progress and cancellation passed through. The server stays warm until
// it has been idle for its timeout_minutes, and is started again after a
// crash, with a backoff; one that keeps crashing is reported with the
// tail of its stderr.
//
// hosted sits beside the adapters, above the manager: it reaches
// sandboxes only through the manager (never a runtime, a store or the
// agent client), and adapters may use it.
package hosted

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// sharedOwner owns the sandboxes of shared servers. An API key's owner
// cannot contain ':', so no caller can be it.
const sharedOwner = "hosted:shared"

// Options configure Hosts.
type Options struct {
	// Manager runs the servers; without one, Hosts only keeps
	// definitions (what `mcpbox server add` needs).
	Manager *manager.Manager
	// File is servers.json; "" keeps definitions in memory only (the Go
	// API's default, and `mcpbox quick`).
	File string
	// HandshakeTimeout bounds the MCP initialize handshake and the first
	// tools/list of a starting server; default 60s.
	HandshakeTimeout time.Duration
	// InstallTimeout bounds each install command; default 10 minutes.
	InstallTimeout time.Duration
	// Templates caches installs as templates; nil runs a server's install
	// commands at every start.
	Templates Templates
	// WatchInterval is how often File is checked for changes made by
	// another process (`mcpbox server add` beside a serve); default 2s.
	WatchInterval time.Duration
	// WarmSandboxes is how many sandboxes of a template are kept ready
	// for the next start once a server of it has stopped (see keepWarm);
	// default 1, negative none.
	WarmSandboxes int
	// WarmAtStart keeps those sandboxes ready from the start, for every
	// server defined (and every one added later) whose next start can
	// take one, not only once a server has stopped: a long-running
	// process (serve, mcp) then answers a server's first call as fast
	// as a restart's. Hosts made for one call leave it off.
	WarmAtStart bool
	Logger      *slog.Logger
}

// Templates is what install caching needs of the templates on this
// machine (the local runtime's template store, in mcpbox).
type Templates interface {
	// Exists reports whether a template of that name exists.
	Exists(ctx context.Context, name string) bool
	// Commit makes template name of session id's sandbox: its template
	// plus everything the session changed, as a new layer.
	Commit(ctx context.Context, id, name string, progress func(msg string)) error
}

// Change says what changed: a server added, removed or redefined (every
// owner: Owner ""), or one owner's instance's catalog (Tools: its tools,
// prompts or resources).
type Change struct {
	Server  string
	Owner   string
	Removed bool
	Tools   bool
}

// Hosts runs hosted servers. It is safe for concurrent use.
type Hosts struct {
	opts Options
	log  *slog.Logger
	file *file // nil: definitions in memory

	memMu sync.Mutex
	mem   map[string]Server
	known map[string]string // name → runKey, as last published

	mu        sync.Mutex
	instances map[string]*instance
	watchers  map[int]func(Change)
	nextWatch int
	// warm releases the manager's pool of each template kept warm for
	// servers stopped here (see keepWarm); closed forbids new ones.
	warm   map[string]func()
	closed bool

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// New returns Hosts. With a File, it watches it until Close.
func New(opts *Options) (*Hosts, error) {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = time.Minute
	}
	if o.InstallTimeout <= 0 {
		o.InstallTimeout = 10 * time.Minute
	}
	if o.WatchInterval <= 0 {
		o.WatchInterval = 2 * time.Second
	}
	if o.WarmSandboxes == 0 {
		o.WarmSandboxes = 1
	}
	h := &Hosts{opts: o, log: o.Logger, mem: map[string]Server{}, instances: map[string]*instance{},
		watchers: map[int]func(Change){}, warm: map[string]func(){}, stop: make(chan struct{})}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	var defs map[string]Server
	var err error
	if o.File != "" {
		h.file = &file{path: o.File}
		if defs, err = h.defs(); err != nil {
			// A broken file is reported at every use, not fatal here:
			// `server config --edit` must still be able to fix it.
			h.log.Error("hosted servers file", "file", o.File, "err", err)
		}
		h.wg.Add(1)
		go h.watch()
	} else if o.WarmAtStart {
		// Later loads are compared with this first one, so servers
		// added from now on are kept warm too.
		defs, err = h.defs()
	}
	if o.WarmAtStart && err == nil {
		for name := range defs {
			go h.warmFor(context.Background(), name)
		}
	}
	return h, nil
}

// File returns the definitions file, "" when they are kept in memory.
func (h *Hosts) File() string { return h.opts.File }

// Close stops every running server and the file watch.
func (h *Hosts) Close() {
	h.stopOnce.Do(func() { close(h.stop) })
	h.wg.Wait()
	h.mu.Lock()
	list := slices.Collect(maps.Values(h.instances))
	h.instances = map[string]*instance{}
	pools := slices.Collect(maps.Values(h.warm))
	h.warm, h.closed = map[string]func(){}, true
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range list {
		wg.Add(1)
		go func() { defer wg.Done(); in.stop(true) }()
	}
	for _, release := range pools {
		wg.Add(1)
		go func() { defer wg.Done(); release() }()
	}
	wg.Wait()
}

// Warm sandboxes. A server's start mostly waits on its sandbox's
// create. Once a server has stopped here (idle, crashed, restarted) while
// these Hosts go on, it is likely to start again: the manager keeps a
// sandbox of the template its next start makes one from ready for it
// (and for any server of that template, any owner), made as a hosted
// server's are: no boot-time kernel, ephemeral. Hosts made for one call
// (`mcpbox quick`) stop their server only at Close, so they never keep
// one. A pooled sandbox cannot take volumes, which are bound at its
// create: servers with volumes get none. The pool lives until Close, or
// until no definition starts from its template any more.

// warmRefillDelay holds a pool's refill back after a take: the server
// starting in the sandbox just taken needs the CPU more.
const warmRefillDelay = 2 * time.Second

// keepWarm asks the manager to keep a sandbox of template ready.
func (h *Hosts) keepWarm(template string) {
	kept := func() bool {
		return h.closed || h.warm[template] != nil
	}
	h.mu.Lock()
	done := kept() || h.opts.WarmSandboxes < 0
	h.mu.Unlock()
	if done {
		return
	}
	// Not under mu, which every call takes: Warm reads the template.
	release, err := h.opts.Manager.Warm(manager.PoolSpec{Template: template, Size: h.opts.WarmSandboxes, NoKernel: true, Ephemeral: true,
		RefillDelay: warmRefillDelay})
	if err != nil {
		h.log.Warn("hosted servers: keep a sandbox warm", "template", template, "err", err)
		return
	}
	h.mu.Lock()
	if kept() {
		h.mu.Unlock()
		release() // closed meanwhile, or kept by another stop
		return
	}
	h.warm[template] = release
	h.mu.Unlock()
}

// warmFor keeps a sandbox ready for the next start of server name, if
// it still exists and may have one.
func (h *Hosts) warmFor(ctx context.Context, name string) {
	def, err := h.Server(name)
	if err != nil {
		return
	}
	t, ok := h.nextTemplate(def)
	if !ok || (t != def.Template && !h.opts.Templates.Exists(ctx, t)) {
		return // not cached (yet): the next start makes its sandbox anyway
	}
	h.keepWarm(t)
}

// pruneWarm releases the pools of templates no definition starts from.
func (h *Hosts) pruneWarm(defs map[string]Server) {
	want := map[string]bool{}
	for _, d := range defs {
		if t, ok := h.nextTemplate(d); ok {
			want[t] = true
		}
	}
	h.mu.Lock()
	var drop []func()
	for t, release := range h.warm {
		if !want[t] {
			drop = append(drop, release)
			delete(h.warm, t)
		}
	}
	h.mu.Unlock()
	for _, release := range drop {
		go release()
	}
}

// nextTemplate is the template def's next start makes its sandbox from
// (its install's cache, once committed), and whether a warm one may
// serve it.
func (h *Hosts) nextTemplate(def Server) (string, bool) {
	if len(def.Volumes) > 0 {
		return "", false
	}
	if len(def.InstallCommands) > 0 && h.opts.Templates != nil {
		return cacheTemplate(def), true
	}
	return def.Template, true
}

func (h *Hosts) watch() {
	defer h.wg.Done()
	t := time.NewTicker(h.opts.WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			if _, err := h.defs(); err != nil {
				h.log.Debug("hosted servers file", "err", err)
			}
		}
	}
}

// defs returns the current definitions, publishing what changed since
// the last look and stopping the instances of removed servers.
func (h *Hosts) defs() (map[string]Server, error) {
	var defs map[string]Server
	if h.file != nil {
		d, _, err := h.file.load()
		if err != nil {
			return nil, err
		}
		defs = d
	} else {
		h.memMu.Lock()
		defs = maps.Clone(h.mem)
		h.memMu.Unlock()
	}
	var changes []Change
	h.memMu.Lock()
	if h.known == nil {
		h.known = map[string]string{}
		for n, s := range defs {
			h.known[n] = s.runKey()
		}
	} else {
		for n, s := range defs {
			if k := s.runKey(); h.known[n] != k {
				h.known[n] = k
				changes = append(changes, Change{Server: n})
			}
		}
		for n := range h.known {
			if _, ok := defs[n]; !ok {
				delete(h.known, n)
				changes = append(changes, Change{Server: n, Removed: true})
			}
		}
	}
	h.memMu.Unlock()
	for _, c := range changes {
		if c.Removed {
			h.stopServer(c.Server)
		}
		h.changed(c)
	}
	if len(changes) > 0 {
		h.pruneWarm(defs)
	}
	if h.opts.WarmAtStart {
		for _, c := range changes {
			if !c.Removed {
				go h.warmFor(context.Background(), c.Server)
			}
		}
	}
	return defs, nil
}

// Servers lists the definitions by name.
func (h *Hosts) Servers() ([]Server, error) {
	defs, err := h.defs()
	if err != nil {
		return nil, err
	}
	return sortedServers(defs), nil
}

// Server returns one definition.
func (h *Hosts) Server(name string) (Server, error) {
	defs, err := h.defs()
	if err != nil {
		return Server{}, err
	}
	s, ok := defs[name]
	if !ok {
		names := slices.Sorted(maps.Keys(defs))
		e := mcpbox.Errorf(mcpbox.ENOTFOUND, "no hosted server named %q", name).With("server", name)
		if len(names) > 0 {
			e.WithSuggestion("the servers are: " + joinNames(names))
		} else {
			e.WithSuggestion("add one with `mcpbox server add NAME --command \"…\"`")
		}
		return Server{}, e
	}
	return s.clone(), nil
}

func joinNames(n []string) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Add adds or replaces a definition. A running instance of a replaced
// one is restarted at its next use.
func (h *Hosts) Add(s Server) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s = s.clone()
	if h.file != nil {
		if err := h.file.update(func(m map[string]Server) error { m[s.Name] = s; return nil }); err != nil {
			return err
		}
	} else {
		h.memMu.Lock()
		h.mem[s.Name] = s
		h.memMu.Unlock()
	}
	_, err := h.defs()
	return err
}

// AddMap adds a definition given as one entry of e2b-mcp's servers.json.
func (h *Hosts) AddMap(name string, m map[string]any) error {
	s, err := FromMap(name, m)
	if err != nil {
		return err
	}
	return h.Add(s)
}

// AddServers adds every entry of a map shaped like e2b-mcp's servers.json.
func (h *Hosts) AddServers(m map[string]map[string]any) error {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if err := h.AddMap(name, m[name]); err != nil {
			return err
		}
	}
	return nil
}

// Remove removes a definition and stops its instances.
func (h *Hosts) Remove(name string) error {
	if _, err := h.Server(name); err != nil {
		return err
	}
	if h.file != nil {
		if err := h.file.update(func(m map[string]Server) error { delete(m, name); return nil }); err != nil {
			return err
		}
	} else {
		h.memMu.Lock()
		delete(h.mem, name)
		h.memMu.Unlock()
	}
	_, err := h.defs()
	return err
}

// Reset removes every definition.
func (h *Hosts) Reset() error {
	if h.file != nil {
		if err := h.file.reset(); err != nil {
			return err
		}
	} else {
		h.memMu.Lock()
		clear(h.mem)
		h.memMu.Unlock()
	}
	_, err := h.defs()
	return err
}

// Watch calls f for every change until the returned func is called. f
// runs on the goroutine that made the change and must not block.
func (h *Hosts) Watch(f func(Change)) (cancel func()) {
	h.mu.Lock()
	id := h.nextWatch
	h.nextWatch++
	h.watchers[id] = f
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.watchers, id)
		h.mu.Unlock()
	}
}

func (h *Hosts) changed(c Change) {
	h.mu.Lock()
	fs := slices.Collect(maps.Values(h.watchers))
	h.mu.Unlock()
	for _, f := range fs {
		f(c)
	}
}

// instanceFor returns the instance serving owner with def.
func (h *Hosts) instanceFor(def Server, owner string) *instance {
	if def.Shared() {
		owner = sharedOwner
	}
	key := def.Name + "\x00" + owner
	h.mu.Lock()
	defer h.mu.Unlock()
	in := h.instances[key]
	if in == nil {
		in = &instance{h: h, name: def.Name, owner: owner}
		h.instances[key] = in
	}
	return in
}

// stopServer stops every instance of a server, for good.
func (h *Hosts) stopServer(name string) {
	h.mu.Lock()
	var list []*instance
	for k, in := range h.instances {
		if in.name == name {
			list = append(list, in)
			delete(h.instances, k)
		}
	}
	h.mu.Unlock()
	for _, in := range list {
		go in.stop(true)
	}
}

// Stop stops owner's instance of a server (the shared one for a shared
// server), if it runs. Its next use starts it again.
func (h *Hosts) Stop(owner, name string) error {
	def, err := h.Server(name)
	if err != nil {
		return err
	}
	h.instanceFor(def, owner).stop(false)
	return nil
}

// CallOptions are the optional parts of a tool call.
type CallOptions struct {
	// OnProgress receives the start-up's progress (install commands, the
	// handshake) and the server's own progress notifications.
	OnProgress func(Progress)
}

// Tools starts owner's instance of a server if needed and returns its
// tools (what the server listed, schemas and all).
func (h *Hosts) Tools(ctx context.Context, owner, name string, opts *CallOptions) ([]*mcp.Tool, error) {
	s, err := h.Open(ctx, owner, name, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Tools(), nil
}

// CachedTools returns the tools owner's instance of a server listed last,
// without starting it; false when it never ran or its definition changed.
func (h *Hosts) CachedTools(owner, name string) ([]*mcp.Tool, bool) {
	def, err := h.Server(name)
	if err != nil {
		return nil, false
	}
	in := h.instanceFor(def, owner)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.catalog.Tools == nil || in.toolsKey != def.runKey() {
		return nil, false
	}
	return slices.Clone(in.catalog.Tools), true
}

// Call calls a tool of owner's instance of a server, starting it if
// needed. args is anything that marshals to a JSON object (nil: {}).
// The result is the server's, isError and all; an error means the call
// got no answer (the server could not start, crashed, or ctx ended — a
// cancelled ctx sends notifications/cancelled to the server).
func (h *Hosts) Call(ctx context.Context, owner, name, tool string, args any, opts *CallOptions) (*mcp.CallToolResult, error) {
	s, err := h.Open(ctx, owner, name, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Call(ctx, tool, args, opts)
}

// Session holds a server warm for several calls: its idle timer does not
// run until Close.
type Session struct {
	h    *Hosts
	in   *instance
	def  Server
	r    *running
	ok   bool
	once sync.Once
}

// Open starts owner's instance of a server if needed and holds it.
func (h *Hosts) Open(ctx context.Context, owner, name string, opts *CallOptions) (*Session, error) {
	if owner == "" {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "a hosted server call needs an owner")
	}
	def, err := h.Server(name)
	if err != nil {
		return nil, err
	}
	if h.opts.Manager == nil {
		return nil, mcpbox.Errorf(mcpbox.EINTERNAL, "hosted: these Hosts have no Manager to run servers with")
	}
	var onProgress func(Progress)
	if opts != nil {
		onProgress = opts.OnProgress
	}
	in := h.instanceFor(def, owner)
	r, err := in.acquire(ctx, def, onProgress)
	if err != nil {
		return nil, err
	}
	return &Session{h: h, in: in, def: def, r: r}, nil
}

// Tools returns the server's tools as last listed.
func (s *Session) Tools() []*mcp.Tool {
	s.in.mu.Lock()
	defer s.in.mu.Unlock()
	return slices.Clone(s.in.catalog.Tools)
}

// Call calls a tool on the held server. If it crashed since, it is
// started again first.
func (s *Session) Call(ctx context.Context, tool string, args any, opts *CallOptions) (*mcp.CallToolResult, error) {
	raw, err := objectArgs(tool, args)
	if err != nil {
		return nil, err
	}
	var onProgress func(Progress)
	if opts != nil {
		onProgress = opts.OnProgress
	}
	if err := s.live(ctx, onProgress); err != nil {
		return nil, err
	}
	res, err := s.in.call(ctx, s.r, tool, raw, onProgress)
	if err == nil {
		s.ok = true
	}
	return res, err
}

// live starts the held server again if it crashed since.
func (s *Session) live(ctx context.Context, onProgress func(Progress)) error {
	select {
	case <-s.r.ended:
		r, err := s.in.acquire(ctx, s.def, onProgress)
		if err != nil {
			return err
		}
		s.in.release(s.r, false, s.def.Idle())
		s.r = r
	default:
	}
	return nil
}

// Close lets the server's idle timer run again.
func (s *Session) Close() {
	s.once.Do(func() { s.in.release(s.r, s.ok, s.def.Idle()) })
}

// objectArgs marshals a call's arguments, which must be a JSON object.
func objectArgs(tool string, args any) (json.RawMessage, error) {
	if args == nil {
		return json.RawMessage("{}"), nil
	}
	b, ok := args.(json.RawMessage)
	if !ok {
		var err error
		if b, err = json.Marshal(args); err != nil {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "arguments of %s: %v", tool, err)
		}
	}
	var obj map[string]json.RawMessage
	if string(b) == "null" || len(b) == 0 {
		return json.RawMessage("{}"), nil
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "arguments of %s must be a JSON object", tool).
			WithSuggestion(`pass them as an object, such as {"path": "/workspace"}`)
	}
	return b, nil
}
