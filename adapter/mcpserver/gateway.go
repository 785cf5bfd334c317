package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
)

// The gateway lists the tools of hosted MCP servers on each owner's MCP
// server, as server__tool, beside mcpbox's own tools, and forwards calls
// to the owner's instance of the server (hosted.Hosts) with progress and
// cancellation passed through. When a server is added, removed or
// changes its tools, the owner's tool list changes, and go-sdk sends
// notifications/tools/list_changed to the connected clients. Resources
// and prompts are not forwarded: tools are what agents call, and each
// would double the names a client must tell apart.

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

// gatewayOwner is one owner's view: its MCP server and the hosted tools
// registered on it.
type gatewayOwner struct {
	owner string
	srv   *mcp.Server

	mu sync.Mutex
	// tools maps each registered gateway name to the server and tool it
	// forwards to, and byServer lists each server's names.
	tools    map[string]gatewayTarget
	byServer map[string][]string
	// synced closes when the first discovery has ended.
	synced chan struct{}
	// syncing serialises syncs per server.
	syncing map[string]*sync.Mutex
	// failed holds the servers whose tools could not be listed, by when:
	// a later tools/list tries them again (at most every retryAfter).
	failed map[string]time.Time
}

// retryAfter spaces the retries of a server whose tools could not be
// listed (it failed to start, say).
const retryAfter = 30 * time.Second

type gatewayTarget struct{ server, tool string }

func newGateway(s *Server, h *hosted.Hosts) *gateway {
	g := &gateway{s: s, h: h, owners: map[string]*gatewayOwner{}}
	h.Watch(g.changed)
	return g
}

// attach adds the gateway to owner's new MCP server and starts
// discovering its hosted tools.
func (g *gateway) attach(srv *mcp.Server, owner string) {
	o := &gatewayOwner{owner: owner, srv: srv, tools: map[string]gatewayTarget{}, byServer: map[string][]string{},
		synced: make(chan struct{}), syncing: map[string]*sync.Mutex{}, failed: map[string]time.Time{}}
	g.mu.Lock()
	g.owners[owner] = o
	g.mu.Unlock()
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
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

// sync brings owner o's tools of one server up to date: its tools as the
// server lists them (starting it if needed), or none once it is gone.
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

	var tools []*mcp.Tool
	if _, err := g.h.Server(server); err == nil {
		var ok bool
		if tools, ok = g.h.CachedTools(o.owner, server); !ok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			tools, err = g.h.Tools(ctx, o.owner, server, nil)
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
	old := o.byServer[server]
	for _, n := range old {
		delete(o.tools, n)
	}
	delete(o.byServer, server)
	var add []*mcp.Tool
	var names []string
	for _, t := range tools {
		name := GatewayName(server, t.Name)
		if prev, taken := o.tools[name]; taken || slices.Contains(names, name) {
			g.s.log.Warn("gateway: tool name collision; tool skipped", "tool", name, "server", server, "server_tool", t.Name,
				"taken_by", prev.server+"/"+prev.tool, "owner", o.owner)
			continue
		}
		names = append(names, name)
		o.tools[name] = gatewayTarget{server: server, tool: t.Name}
		add = append(add, g.forward(name, server, t))
	}
	o.byServer[server] = names
	if gone := slices.DeleteFunc(slices.Clone(old), func(n string) bool { return slices.Contains(names, n) }); len(gone) > 0 {
		o.srv.RemoveTools(gone...)
	}
	for _, t := range add {
		o.srv.AddTool(t, g.handler(o.owner, t.Name, server, o.tools[t.Name].tool))
	}
}

// GatewayName is server__tool made safe (mcpbox's own tool names have
// no "__", so only hosted tools can collide) for strict clients: characters
// outside [a-zA-Z0-9_-] become '_', and a name past 64 characters is cut
// and ends with a hash of the whole, so that it stays unique.
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
