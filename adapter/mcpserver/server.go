// Package mcpserver is mcpbox's MCP adapter: the tools agents call to run
// code, commands and file operations in sessions. It turns MCP tool calls
// into session-manager calls and domain errors into MCP results; transports
// (stdio, SSE, Streamable HTTP) are wired up by its callers.
//
// Sandbox state lives in sessions named by a session_id argument, never in
// the MCP session, so stateless clients and reconnects keep their work.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/manager"
)

// Options configure a Server. Manager is required.
type Options struct {
	Manager *manager.Manager
	// Version is reported in the MCP initialize result.
	Version string
	// RequireSessionID makes calls without a session_id an error instead
	// of creating a session, for deployments that create sessions elsewhere.
	RequireSessionID bool
	// OnCall, if set, is told of every tool call when it ends: the tool,
	// the error code ("" for success) and how long it took. Metrics use it.
	OnCall func(tool, code string, d time.Duration)
	// Hosted, when set, turns the gateway on: the hosted MCP servers'
	// tools are listed beside mcpbox's as server__tool, with their
	// prompts and resources (gateway.go).
	Hosted *hosted.Hosts
	Logger *slog.Logger
}

// Server hands out one MCP server per owner. Every tool of an owner's
// server acts as that owner, so no transport needs to carry the owner
// through to the tool handlers, and one owner's MCP server cannot name
// another owner's sessions.
type Server struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	owners map[string]*mcp.Server
	gw     *gateway // nil: no gateway
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Manager == nil {
		return nil, fmt.Errorf("mcpserver: a Manager is required")
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{opts: opts, log: opts.Logger, owners: map[string]*mcp.Server{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opts.Hosted != nil {
		s.gw = newGateway(s, opts.Hosted)
	}
	return s, nil
}

// For returns the MCP server whose tools act as owner.
func (s *Server) For(owner string) *mcp.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.owners[owner]; ok {
		return srv
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpbox", Title: "mcpbox code sandboxes", Version: s.opts.Version},
		&mcp.ServerOptions{
			Instructions: instructions,
			// go-sdk logs every connection at info; mcpbox's own log says
			// what matters, so only its warnings pass.
			Logger: slog.New(minLevel{s.log.Handler(), slog.LevelWarn}),
			// No logging capability: mcpbox logs on the server side.
			Capabilities: s.gw.capabilities(),
		})
	srv.AddReceivingMiddleware(rpcErrorData)
	for _, t := range s.tools() {
		t.add(srv, s, owner)
	}
	if s.gw != nil {
		s.gw.attach(srv, owner)
	}
	s.owners[owner] = srv
	return srv
}

const instructions = `mcpbox runs code in isolated, stateful sandboxes ("sessions").
Call execute_code without session_id to start a session; reuse the returned session_id so variables, imports, files and installed packages persist between calls.
Use execute_command for shell lines (pip install, git, ls | grep ...), read_file/write_file/list_files for files under /workspace, and stop_session when done.`

// rpcErrorData gives JSON-RPC errors the same data object tool errors
// carry, so a client matches on error_code wherever the failure surfaced.
func rpcErrorData(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil {
			return res, nil
		}
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			return res, rpcError(jsonrpc.CodeInternalError, err)
		}
		if je.Data == nil {
			code := mcpbox.EINTERNAL
			var suggest string
			switch je.Code {
			case jsonrpc.CodeInvalidParams:
				code = mcpbox.EINVALID
				if strings.HasPrefix(je.Message, "unknown tool") {
					suggest = "call tools/list for the tools this server has"
				}
			case jsonrpc.CodeMethodNotFound:
				code = mcpbox.EUNSUPPORTED
			}
			e := mcpbox.Errorf(code, "%s", je.Message)
			if suggest != "" {
				e.WithSuggestion(suggest)
			}
			d := rpcError(je.Code, e)
			return res, d
		}
		return res, err
	}
}

// toolDef describes one tool. In is the arguments' Go type, from which the
// input schema is derived; Out the structured result's.
type toolDef[In, Out any] struct {
	name, title, description string
	readOnly, destructive    bool
	// schema adjusts the derived input schema: enums, ranges, defaults.
	schema func(*jsonschema.Schema)
	// required names the output properties every successful result has.
	required []string
	run      func(ctx context.Context, c *call, in *In) (*Out, error)
	// text renders a result for the readable content block.
	text func(*Out) string
}

// registrar erases toolDef's type parameters so tools fit one list.
type registrar interface {
	add(srv *mcp.Server, s *Server, owner string)
}

// call is one tool call in progress.
type call struct {
	s     *Server
	owner string
	req   *mcp.CallToolRequest
	// content collects extra blocks (images) to send beside the text.
	content []mcp.Content

	// Output held for progress, under progressMu. Notifications are sent
	// by one goroutine per call (sendq, then sent closes), never while
	// progressMu is held: a slow client must not stall the sandbox's
	// output, only lose progress messages past sendq's room.
	progressMu    sync.Mutex
	progress      float64 // owned by the sender
	pending       strings.Builder
	pendingStream string
	timer         *time.Timer
	sendq         chan string
	sent          chan struct{}
	dropped       int
	// send delivers one progress message; nil means notify. Tests set it.
	send func(ctx context.Context, msg string)
}

// maxProgressChunk bounds one progress message's text; longer output is
// sent in several.
const maxProgressChunk = 4096

// notify sends a progress notification when the caller asked for them
// with a progress token. Failures are ignored: progress is best effort.
func (c *call) notify(ctx context.Context, msg string) {
	tok := c.req.Params.GetProgressToken()
	if tok == nil || c.req.Session == nil {
		return
	}
	c.progress++
	c.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: c.progress, Message: msg})
}

// output streams a chunk of stdout or stderr as progress. Programs write
// in small pieces (print writes each argument separately), so a chunk is
// held until its line ends, 4 KiB gather or it has waited 100 ms: about
// one message per line, not one per write. flushOutput sends the rest.
func (c *call) output(ctx context.Context, stream, text string) {
	if c.send == nil && c.req.Params.GetProgressToken() == nil {
		return
	}
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	if stream != c.pendingStream {
		c.flushLocked(ctx)
		c.pendingStream = stream
	}
	for len(text) > 0 {
		n := min(len(text), maxProgressChunk-c.pending.Len())
		c.pending.WriteString(text[:n])
		text = text[n:]
		if c.pending.Len() >= maxProgressChunk {
			c.flushLocked(ctx)
		}
	}
	if strings.HasSuffix(c.pending.String(), "\n") {
		c.flushLocked(ctx)
	} else if c.pending.Len() > 0 && c.timer == nil {
		c.timer = time.AfterFunc(100*time.Millisecond, func() { c.flushOutput(ctx) })
	}
}

// flushOutput hands any held output to the sender.
func (c *call) flushOutput(ctx context.Context) {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	c.flushLocked(ctx)
}

// finishOutput hands the rest of the output to the sender and waits
// until it has sent what it holds: progress arrives before the result.
func (c *call) finishOutput(ctx context.Context) {
	c.progressMu.Lock()
	c.flushLocked(ctx)
	q, sent := c.sendq, c.sent
	c.sendq = nil
	c.progressMu.Unlock()
	if q != nil {
		close(q)
		<-sent
	}
}

// flushLocked queues the held output as one message, starting the sender
// at the first. A full queue drops the message: progress is best effort,
// and the result carries all the output anyway.
func (c *call) flushLocked(ctx context.Context) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.pending.Len() == 0 {
		return
	}
	msg := c.pendingStream + ": " + c.pending.String()
	c.pending.Reset()
	if c.sendq == nil {
		q, sent := make(chan string, 64), make(chan struct{})
		c.sendq, c.sent = q, sent
		go func() {
			defer close(sent)
			send := c.send
			if send == nil {
				send = c.notify
			}
			for m := range q {
				send(ctx, m)
			}
		}()
	}
	select {
	case c.sendq <- msg:
	default:
		c.dropped++
	}
}

func (d *toolDef[In, Out]) add(srv *mcp.Server, s *Server, owner string) {
	in, err := jsonschema.For[In](&jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", d.name, err))
	}
	// The derived schema refuses unknown properties: a model that invents
	// an argument learns so, where a silent drop would mislead it.
	if d.schema != nil {
		d.schema(in)
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", d.name, err))
	}
	out := outputSchema[Out](d.required)
	// The SDK marshals a tool's input schema on every call of a
	// 2026-07-28 client (to look for x-mcp-header annotations); as JSON
	// already, that is a copy instead of a walk of the schema by reflection.
	inJSON, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", d.name, err))
	}
	t := &mcp.Tool{
		Name: d.name, Title: d.title, Description: d.description,
		InputSchema: json.RawMessage(inJSON), OutputSchema: out,
		Annotations: &mcp.ToolAnnotations{Title: d.title, ReadOnlyHint: d.readOnly, DestructiveHint: &d.destructive, OpenWorldHint: new(bool)},
	}
	srv.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		c := &call{s: s, owner: owner, req: req}
		res, code, err := d.handle(ctx, c, in, resolved)
		if s.opts.OnCall != nil {
			s.opts.OnCall(d.name, code, time.Since(start))
		}
		return res, err
	})
}

func (d *toolDef[In, Out]) handle(ctx context.Context, c *call, schema *jsonschema.Schema, resolved *jsonschema.Resolved) (*mcp.CallToolResult, string, error) {
	args := c.req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var raw map[string]any
	if err := json.Unmarshal(args, &raw); err != nil {
		// Not an object at all: the request is malformed, not the model's
		// choice of a value, so it stays a protocol error.
		return nil, mcpbox.EINVALID, rpcError(jsonrpc.CodeInvalidParams,
			mcpbox.Errorf(mcpbox.EINVALID, "arguments of %s must be a JSON object", d.name))
	}
	// Our own words first: the validator's ("0/1 is less than 1.000000")
	// tell a model nothing it can act on.
	if err := checkArgs(d.name, schema, raw); err != nil {
		return d.failure(nil, err), mcpbox.EINVALID, nil
	}
	if err := resolved.ApplyDefaults(&raw); err != nil {
		return nil, mcpbox.EINTERNAL, rpcError(jsonrpc.CodeInternalError, err)
	}
	if err := resolved.Validate(raw); err != nil {
		res := d.failure(nil, mcpbox.Errorf(mcpbox.EINVALID, "invalid arguments for %s: %s", d.name, cleanSchemaError(err)).
			WithSuggestion("check the tool's input schema and call it again with corrected arguments"))
		return res, mcpbox.EINVALID, nil
	}
	b, _ := json.Marshal(raw)
	in := new(In)
	if err := json.Unmarshal(b, in); err != nil {
		res := d.failure(nil, mcpbox.Errorf(mcpbox.EINVALID, "invalid arguments for %s: %v", d.name, err))
		return res, mcpbox.EINVALID, nil
	}
	out, err := d.safeRun(ctx, c, in)
	if err != nil {
		if ctx.Err() != nil && mcpbox.ErrorCode(err) == mcpbox.EINTERNAL {
			// The client cancelled; nobody reads this result.
			err = mcpbox.Errorf(mcpbox.ETIMEOUT, "the call was cancelled").Wrap(err)
		}
		if mcpbox.ErrorCode(err) == mcpbox.EINTERNAL {
			c.s.log.Error("tool failed", "tool", d.name, "owner", c.owner, "err", err)
		}
		res := d.failure(out, err)
		res.Content = append(res.Content, c.content...)
		return res, mcpbox.ErrorCode(err), nil
	}
	sc, _ := json.Marshal(out)
	res := &mcp.CallToolResult{StructuredContent: json.RawMessage(sc)}
	res.Content = append([]mcp.Content{&mcp.TextContent{Text: d.text(out)}}, c.content...)
	return res, "", nil
}

// safeRun turns a panic in a tool into an internal error: one bad call
// must not take the server and everyone's calls down with it.
func (d *toolDef[In, Out]) safeRun(ctx context.Context, c *call, in *In) (out *Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.log.Error("tool panicked", "tool", d.name, "panic", r)
			out, err = nil, mcpbox.Errorf(mcpbox.EINTERNAL, "internal error in %s", d.name)
		}
	}()
	return d.run(ctx, c, in)
}

// failure is an isError result: the readable text, and as structured
// content whatever partial result there is merged with the ToolError.
func (d *toolDef[In, Out]) failure(out *Out, err error) *mcp.CallToolResult {
	te := toolError(err)
	merged := map[string]any{}
	if out != nil {
		b, _ := json.Marshal(out)
		json.Unmarshal(b, &merged)
	}
	b, _ := json.Marshal(te)
	var tm map[string]any
	json.Unmarshal(b, &tm)
	maps.Copy(merged, tm)
	text := te.ErrorCode + ": " + te.Message
	if out != nil {
		if t := d.text(out); t != "" {
			text = t + "\n" + text
		}
	}
	for _, s := range te.RecoverySuggestions {
		text += "\n- " + s
	}
	sc, _ := json.Marshal(merged)
	return &mcp.CallToolResult{IsError: true, StructuredContent: json.RawMessage(sc),
		Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// outputSchema derives Out's schema and widens it to also describe the
// error fields: strict clients (the TypeScript SDK) validate the
// structured content of failed calls against it too.
func outputSchema[Out any](required []string) *jsonschema.Schema {
	s, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(err)
	}
	es, err := jsonschema.For[ToolError](nil)
	if err != nil {
		panic(err)
	}
	for _, k := range es.PropertyOrder {
		s.Properties[k] = es.Properties[k]
		s.PropertyOrder = append(s.PropertyOrder, k)
	}
	anyToObject(s)
	s.Required = nil
	s.AnyOf = []*jsonschema.Schema{{Required: required}, {Required: slices.Clone(es.Required)}}
	return s
}

// anyToObject gives the schema jsonschema-go derives for an `any` field a
// description. An empty schema is written as `true`, which means the same
// as {} but which validators expecting a schema object (the spec's JSON
// schema for tools/list) refuse.
func anyToObject(s *jsonschema.Schema) {
	for k, p := range s.Properties {
		if p == nil || (p.Type == "" && p.Types == nil && len(p.Properties) == 0 && p.Items == nil && p.Ref == "") {
			d := descriptionOf(p)
			if d == "" {
				d = "any JSON value"
			}
			s.Properties[k] = &jsonschema.Schema{Description: d}
			continue
		}
		anyToObject(p)
	}
	if s.Items != nil {
		anyToObject(s.Items)
	}
}

func descriptionOf(s *jsonschema.Schema) string {
	if s == nil {
		return ""
	}
	return s.Description
}

// cleanSchemaError shortens the validator's message to what a model needs.
func cleanSchemaError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.HasPrefix(msg, "validating") {
		msg = msg[i+2:]
	}
	return msg
}

// minLevel drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
