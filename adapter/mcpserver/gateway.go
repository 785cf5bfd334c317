package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
)

// The gateway lists the tools and prompts of hosted MCP servers on each
// owner's MCP server, as server__tool and server__prompt, beside
// mcpbox's own tools, and their resources and resource templates under
// their own URIs. Calls, prompts/get and resources/read go to the
// owner's instance of the server (hosted.Hosts); calls pass progress
// and cancellation through. When a server is added, removed or changes
// its lists, the owner's lists change, and go-sdk sends the matching
// list_changed notification to the connected clients.
//
// Resources keep the server's URIs, unprefixed: the same URIs appear in
// the servers' tool results and prompts (resource links, embedded
// resources), and a client reads them back as it got them; a prefix
// would have to be rewritten into every result. A URI (or URI template)
// that another server of the owner already lists is skipped with a
// warning, as a colliding tool name is; templates that merely overlap
// go to the first that matches. Subscriptions (resources/subscribe) are
// not forwarded: mcpbox does not advertise them. A read's contents are
// one message from the sandbox, which package hosted bounds.

// gatewayToolName is what strict clients accept as a tool name.
var gatewayToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// discoveryWait bounds how long a tools/list waits for an owner's hosted
// servers to start and list their tools the first time: a one-shot client
// (the Inspector CLI) must see them, but a server that installs for
// minutes must not hold every listing that long. Tools that come later
// arrive with list_changed.
const discoveryWait = 30 * time.Second

type gateway struct {
	s *Server
	h *hosted.Hosts

	mu     sync.Mutex
	owners map[string]*gatewayOwner
}

// gatewayOwner is one owner's view: its MCP server and the hosted tools,
// prompts and resources registered on it.
type gatewayOwner struct {
	owner string
	srv   *mcp.Server

	mu sync.Mutex
	// tools and prompts are keyed by gateway name, resources by URI and
	// templates by URI template.
	tools, prompts, resources, templates registry
	// synced closes when the first discovery has ended.
	synced chan struct{}
	// syncing serialises syncs per server.
	syncing map[string]*sync.Mutex
	// failed holds the servers whose lists could not be had, by when: a
	// later listing tries them again (at most every retryAfter).
	failed map[string]time.Time
}

// retryAfter spaces the retries of a server whose tools could not be
// listed (it failed to start, say).
const retryAfter = 30 * time.Second

// gatewayTarget is what a registered name forwards to: a server and
// its own name of the item (a tool's or prompt's name, a URI).
type gatewayTarget struct{ server, item string }

// registry is one kind of forwarded item on an owner's server.
type registry struct {
	kind     string                   // "tool", "prompt", …: for the log
	targets  map[string]gatewayTarget // registered name → target
	byServer map[string][]string      // server → its registered names
}

func newRegistry(kind string) registry {
	return registry{kind: kind, targets: map[string]gatewayTarget{}, byServer: map[string][]string{}}
}

// gatewayEntry is an item a server lists: its registered name, its own
// name, and where it is in the server's list.
type gatewayEntry struct {
	name, item string
	i          int
}

// set makes want server's entries. A name another server has, or that
// comes twice, is skipped with a warning. It returns the names server
// had and has no more, and the entries kept.
func (g *gateway) set(o *gatewayOwner, r *registry, server string, want []gatewayEntry) (gone []string, kept []gatewayEntry) {
	old := r.byServer[server]
	for _, n := range old {
		delete(r.targets, n)
	}
	var names []string
	has := map[string]bool{}
	for _, e := range want {
		if prev, taken := r.targets[e.name]; taken {
			g.s.log.Warn("gateway: "+r.kind+" name collision; "+r.kind+" skipped", r.kind, e.name, "server", server, "server_"+r.kind, e.item,
				"taken_by", prev.server+"/"+prev.item, "owner", o.owner)
			continue
		}
		r.targets[e.name] = gatewayTarget{server: server, item: e.item}
		names = append(names, e.name)
		has[e.name] = true
		kept = append(kept, e)
	}
	if len(names) > 0 {
		r.byServer[server] = names
	} else {
		delete(r.byServer, server)
	}
	gone = slices.DeleteFunc(slices.Clone(old), func(n string) bool { return has[n] })
	return gone, kept
}

func newGateway(s *Server, h *hosted.Hosts) *gateway {
	g := &gateway{s: s, h: h, owners: map[string]*gatewayOwner{}}
	h.Watch(g.changed)
	return g
}

// capabilities are those of an owner's MCP server: none beyond the
// inferred ones (tools; no logging: mcpbox logs on the server side)
// without the gateway; with it, prompts and resources from the start, as
// a client that saw neither at its initialize would never ask for the
// hosted servers' that come later. Subscriptions are not forwarded.
func (g *gateway) capabilities() *mcp.ServerCapabilities {
	if g == nil {
		return &mcp.ServerCapabilities{}
	}
	return &mcp.ServerCapabilities{Prompts: &mcp.PromptCapabilities{ListChanged: true},
		Resources: &mcp.ResourceCapabilities{ListChanged: true}}
}

// attach adds the gateway to owner's new MCP server and starts
// discovering its hosted tools.
func (g *gateway) attach(srv *mcp.Server, owner string) {
	o := &gatewayOwner{owner: owner, srv: srv, tools: newRegistry("tool"), prompts: newRegistry("prompt"),
		resources: newRegistry("resource"), templates: newRegistry("resource_template"),
		synced: make(chan struct{}), syncing: map[string]*sync.Mutex{}, failed: map[string]time.Time{}}
	g.mu.Lock()
	g.owners[owner] = o
	g.mu.Unlock()
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list", "prompts/list", "resources/list", "resources/templates/list":
				wctx, cancel := context.WithTimeout(ctx, discoveryWait)
				select {
				case <-o.synced:
				case <-wctx.Done():
				}
				cancel()
				g.retryFailed(o)
			}
			return next(ctx, method, req)
		}
	})
	go func() {
		defer close(o.synced)
		servers, err := g.h.Servers()
		if err != nil {
			g.s.log.Warn("gateway: hosted servers", "err", err)
			return
		}
		var wg sync.WaitGroup
		for _, def := range servers {
			wg.Add(1)
			go func() { defer wg.Done(); g.sync(o, def.Name) }()
		}
		wg.Wait()
	}()
}

// changed re-syncs what a change touches.
func (g *gateway) changed(c hosted.Change) {
	g.mu.Lock()
	var targets []*gatewayOwner
	for owner, o := range g.owners {
		if c.Owner == "" || c.Owner == owner || strings.HasPrefix(c.Owner, "hosted:") {
			targets = append(targets, o)
		}
	}
	g.mu.Unlock()
	for _, o := range targets {
		go g.sync(o, c.Server)
	}
}

// retryFailed syncs again, in the background, the servers whose tools
// could not be listed a while ago: what arrives comes with list_changed.
func (g *gateway) retryFailed(o *gatewayOwner) {
	o.mu.Lock()
	var again []string
	for server, at := range o.failed {
		if time.Since(at) >= retryAfter {
			again = append(again, server)
			o.failed[server] = time.Now() // one retry at a time
		}
	}
	o.mu.Unlock()
	for _, server := range again {
		go g.sync(o, server)
	}
}

// sync brings owner o's tools, prompts and resources of one server up
// to date: as the server lists them (starting it if needed), or none
// once it is gone.
func (g *gateway) sync(o *gatewayOwner, server string) {
	o.mu.Lock()
	lock := o.syncing[server]
	if lock == nil {
		lock = &sync.Mutex{}
		o.syncing[server] = lock
	}
	o.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	var cat hosted.Catalog
	if _, err := g.h.Server(server); err == nil {
		var ok bool
		if cat, ok = g.h.CachedCatalog(o.owner, server); !ok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			cat, err = g.h.Catalog(ctx, o.owner, server, nil)
			cancel()
			if err != nil {
				g.s.log.Warn("gateway: hosted server's tools are not listed", "server", server, "owner", o.owner, "err", err)
				o.mu.Lock()
				o.failed[server] = time.Now()
				o.mu.Unlock()
				return
			}
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.failed, server)
	g.registerLocked(o, server, cat)
}

// registerLocked makes cat what o's server lists of server: its tools
// and prompts under gateway names, its resources and templates under
// their own URIs (when valid: go-sdk panics on others). What a sandbox
// listed may hold nulls, which are skipped. o.mu is held.
func (g *gateway) registerLocked(o *gatewayOwner, server string, cat hosted.Catalog) {
	var want []gatewayEntry
	for i, t := range cat.Tools {
		if t != nil {
			want = append(want, gatewayEntry{name: GatewayName(server, t.Name), item: t.Name, i: i})
		}
	}
	gone, kept := g.set(o, &o.tools, server, want)
	if len(gone) > 0 {
		o.srv.RemoveTools(gone...)
	}
	for _, e := range kept {
		o.srv.AddTool(g.forward(e.name, server, cat.Tools[e.i]), g.handler(o.owner, e.name, server, e.item))
	}

	want = nil
	for i, p := range cat.Prompts {
		if p != nil {
			want = append(want, gatewayEntry{name: GatewayName(server, p.Name), item: p.Name, i: i})
		}
	}
	gone, kept = g.set(o, &o.prompts, server, want)
	if len(gone) > 0 {
		o.srv.RemovePrompts(gone...)
	}
	for _, e := range kept {
		o.srv.AddPrompt(forwardPrompt(e.name, server, cat.Prompts[e.i]), g.promptHandler(o.owner, server, e.item))
	}

	want = nil
	for i, r := range cat.Resources {
		if r == nil {
			continue
		}
		if u, err := url.Parse(r.URI); err != nil || u.Scheme == "" {
			g.s.log.Warn("gateway: resource URI is not absolute; resource skipped", "uri", r.URI, "server", server, "owner", o.owner)
			continue
		}
		want = append(want, gatewayEntry{name: r.URI, item: r.URI, i: i})
	}
	gone, kept = g.set(o, &o.resources, server, want)
	if len(gone) > 0 {
		o.srv.RemoveResources(gone...)
	}
	for _, e := range kept {
		r := *cat.Resources[e.i]
		r.Description, r.Meta = strings.TrimSpace("["+server+"] "+r.Description), nil
		o.srv.AddResource(&r, g.readHandler(o.owner, server))
	}

	want = nil
	for i, t := range cat.ResourceTemplates {
		if t == nil {
			continue
		}
		if _, err := uritemplate.New(t.URITemplate); err != nil {
			g.s.log.Warn("gateway: resource template is not valid; template skipped", "uri_template", t.URITemplate, "server", server, "owner", o.owner)
			continue
		}
		want = append(want, gatewayEntry{name: t.URITemplate, item: t.URITemplate, i: i})
	}
	gone, kept = g.set(o, &o.templates, server, want)
	if len(gone) > 0 {
		o.srv.RemoveResourceTemplates(gone...)
	}
	for _, e := range kept {
		t := *cat.ResourceTemplates[e.i]
		t.Description, t.Meta = strings.TrimSpace("["+server+"] "+t.Description), nil
		o.srv.AddResourceTemplate(&t, g.readHandler(o.owner, server))
	}
}

// GatewayName is server__tool (or server__prompt) made safe (mcpbox's
// own tool names have no "__", so only hosted tools can collide) for
// strict clients: characters outside [a-zA-Z0-9_-] become '_', and a name
// past 64 characters is cut and ends with a hash of the whole, so that it
// stays unique.
func GatewayName(server, tool string) string {
	full := server + "__" + tool
	b := []byte(full)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	name := string(b)
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(full))
		name = name[:55] + "_" + hex.EncodeToString(sum[:4])
	}
	return name
}

// forward is the gateway's copy of a hosted tool: its schemas and
// annotations as the server gave them, under the gateway name.
func (g *gateway) forward(name, server string, t *mcp.Tool) *mcp.Tool {
	c := *t
	c.Name = name
	if c.Title == "" {
		c.Title = server + ": " + t.Name
	}
	c.Description = strings.TrimSpace("[" + server + "] " + t.Description)
	if !validObjectSchema(c.InputSchema) {
		c.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	// Meta of the hosted server (its own UI hints) is not ours to pass on.
	c.Meta = nil
	return &c
}

// forwardPrompt is the gateway's copy of a hosted prompt, arguments and
// all, under the gateway name.
func forwardPrompt(name, server string, p *mcp.Prompt) *mcp.Prompt {
	c := *p
	c.Name = name
	if c.Title == "" {
		c.Title = server + ": " + p.Name
	}
	c.Description = strings.TrimSpace("[" + server + "] " + p.Description)
	c.Meta = nil
	return &c
}

// promptHandler forwards prompts/get to the server's own prompt.
func (g *gateway) promptHandler(owner, server, prompt string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return g.h.GetPrompt(ctx, owner, server, prompt, req.Params.Arguments)
	}
}

// readHandler forwards resources/read to the server the resource (or
// template) came from.
func (g *gateway) readHandler(owner, server string) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return g.h.ReadResource(ctx, owner, server, req.Params.URI)
	}
}

// validObjectSchema reports whether a schema is an object schema, as
// go-sdk requires of every tool's input.
func validObjectSchema(s any) bool {
	b, err := json.Marshal(s)
	if err != nil {
		return false
	}
	var m map[string]any
	return json.Unmarshal(b, &m) == nil && m["type"] == "object"
}

// handler forwards one call, progress and cancellation included.
func (g *gateway) handler(owner, name, server, tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		var opts hosted.CallOptions
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			var mu sync.Mutex
			last := 0.0
			opts.OnProgress = func(p hosted.Progress) {
				mu.Lock()
				defer mu.Unlock()
				// Progress must increase: start-up messages and the
				// server's own count share one token.
				v := p.Progress
				if v <= last {
					v = last + 1e-6
				}
				last = v
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: v, Total: p.Total, Message: p.Message})
			}
		}
		res, err := g.h.Call(ctx, owner, server, tool, req.Params.Arguments, &opts)
		code := ""
		if err != nil {
			code = mcpbox.ErrorCode(err)
			if ctx.Err() != nil {
				code = mcpbox.ETIMEOUT
				err = mcpbox.Errorf(mcpbox.ETIMEOUT, "the call was cancelled").Wrap(err)
			}
			te := toolError(err)
			text := te.ErrorCode + ": " + te.Message
			for _, s := range te.RecoverySuggestions {
				text += "\n- " + s
			}
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
		}
		if g.s.opts.OnCall != nil {
			g.s.opts.OnCall(name, code, time.Since(start))
		}
		return res, nil
	}
}
