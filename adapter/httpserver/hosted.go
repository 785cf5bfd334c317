package httpserver

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
)

// The /v1 routes serve hosted MCP servers to services that do not speak
// MCP, with the same keys and owners as /mcp:
//
//	GET  /v1/servers                      the definitions (env names only)
//	GET  /v1/servers/{name}/tools         the server's tools, starting it if needed (NDJSON too)
//	POST /v1/servers/{name}/tools/{tool}  call a tool; the body is its arguments
//	POST /v1/quick                        {command, env, network, tool, arguments}: one call, nothing saved
//
// A call answers the tool's result as MCP shapes it (content,
// structuredContent, isError). With Accept: application/x-ndjson it
// streams instead: {"progress": {...}} lines while the server installs,
// starts and reports progress, then {"result": {...}} or {"error": {...}}.
// Definitions are not added over HTTP: a definition runs commands in
// every owner's sandboxes, so only the operator edits servers.json.

// routeHosted adds the /v1 routes when hosted servers are configured.
func (h *Handler) routeHosted(guard func(http.Handler) http.Handler) {
	if h.opts.Hosted == nil {
		return
	}
	h.mux.Handle("GET /v1/servers", guard(http.HandlerFunc(h.listServers)))
	h.mux.Handle("GET /v1/servers/{name}/tools", guard(http.HandlerFunc(h.listHostedTools)))
	h.mux.Handle("POST /v1/servers/{name}/tools/{tool}", guard(http.HandlerFunc(h.callHostedTool)))
	h.mux.Handle("POST /v1/quick", guard(http.HandlerFunc(h.quick)))
}

// ServerView is a hosted server's definition as the API shows it: env
// values are secrets, so only their names appear.
type ServerView struct {
	Name            string                `json:"name"`
	Command         string                `json:"command"`
	Description     string                `json:"description,omitempty"`
	Env             []string              `json:"env,omitempty"`
	InstallCommands []string              `json:"install_commands,omitempty"`
	TimeoutMinutes  float64               `json:"timeout_minutes"`
	Template        string                `json:"template,omitempty"`
	Network         *mcpbox.NetworkPolicy `json:"network,omitempty"`
	Volumes         []string              `json:"volumes,omitempty"`
	Scope           string                `json:"scope"`
}

// ViewOf is a definition as the API shows it.
func ViewOf(s hosted.Server) ServerView {
	v := ServerView{Name: s.Name, Command: s.Command, Description: s.Description,
		InstallCommands: s.InstallCommands, TimeoutMinutes: s.TimeoutMinutes, Template: s.Template,
		Network: s.Network, Volumes: s.Volumes, Scope: s.Scope}
	for k := range s.Env {
		v.Env = append(v.Env, k)
	}
	slices.Sort(v.Env)
	if v.TimeoutMinutes == 0 {
		v.TimeoutMinutes = hosted.DefaultTimeoutMinutes
	}
	if v.Scope == "" {
		v.Scope = hosted.ScopeOwner
	}
	return v
}

// ToolView is a hosted tool as the API shows it (e2b-mcp's field names).
type ToolView struct {
	Name         string `json:"name"`
	Description  string `json:"description"`
	InputSchema  any    `json:"input_schema"`
	OutputSchema any    `json:"output_schema,omitempty"`
	ServerName   string `json:"server_name"`
}

func (h *Handler) listServers(w http.ResponseWriter, r *http.Request) {
	list, err := h.opts.Hosted.Servers()
	if err != nil {
		h.writeError(w, err)
		return
	}
	out := make([]ServerView, 0, len(list))
	for _, s := range list {
		out = append(out, ViewOf(s))
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}

func (h *Handler) listHostedTools(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	h.answer(w, r, func(opts *hosted.CallOptions) (any, error) {
		tools, err := h.opts.Hosted.Tools(r.Context(), ownerOf(r), name, opts)
		if err != nil {
			return nil, err
		}
		out := make([]ToolView, 0, len(tools))
		for _, t := range tools {
			out = append(out, ToolView{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, ServerName: name})
		}
		return map[string]any{"server": name, "tools": out}, nil
	})
}

func (h *Handler) callHostedTool(w http.ResponseWriter, r *http.Request) {
	args, err := h.readArgs(w, r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	name, tool := r.PathValue("name"), r.PathValue("tool")
	h.answerCall(w, r, func(opts *hosted.CallOptions) (*mcp.CallToolResult, error) {
		return h.opts.Hosted.Call(r.Context(), ownerOf(r), name, tool, args, opts)
	})
}

// quick runs a server from a command for one call, in the caller's own
// sandbox (as execute_command would), and stops it.
func (h *Handler) quick(w http.ResponseWriter, r *http.Request) {
	body, err := h.readArgs(w, r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	var in struct {
		Command   string                `json:"command"`
		Env       map[string]string     `json:"env"`
		Network   *mcpbox.NetworkPolicy `json:"network"`
		Tool      string                `json:"tool"`
		Arguments json.RawMessage       `json:"arguments"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		h.writeError(w, mcpbox.Errorf(mcpbox.EINVALID, "the body must be {command, env, tool, arguments}: %v", err))
		return
	}
	if in.Tool == "" {
		h.writeError(w, mcpbox.Errorf(mcpbox.EINVALID, "tool is empty").WithSuggestion("name the tool to call"))
		return
	}
	tmp, err := hosted.New(&hosted.Options{Manager: h.opts.Manager, Logger: h.log})
	if err != nil {
		h.writeError(w, err)
		return
	}
	defer tmp.Close()
	if err := tmp.Add(hosted.Server{Name: "quick", Command: in.Command, Env: in.Env, Network: in.Network}); err != nil {
		h.writeError(w, err)
		return
	}
	h.answerCall(w, r, func(opts *hosted.CallOptions) (*mcp.CallToolResult, error) {
		return tmp.Call(r.Context(), ownerOf(r), "quick", in.Tool, in.Arguments, opts)
	})
}

// readArgs reads a JSON body, bounded like every body.
func (h *Handler) readArgs(w http.ResponseWriter, r *http.Request) (json.RawMessage, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, mcpbox.Errorf(mcpbox.ELIMIT, "the body is larger than %d bytes", h.opts.MaxBodyBytes)
		}
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "read the body: %v", err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "the body is not JSON").WithSuggestion(`send the tool's arguments as a JSON object, such as {"path": "/workspace"}`)
	}
	return b, nil
}

// answerCall runs a call and answers it, streamed as NDJSON when asked.
func (h *Handler) answerCall(w http.ResponseWriter, r *http.Request, call func(*hosted.CallOptions) (*mcp.CallToolResult, error)) {
	h.answer(w, r, func(opts *hosted.CallOptions) (any, error) {
		res, err := call(opts)
		if err != nil {
			return nil, err
		}
		return res, nil
	})
}

// answer runs work that may start a server and answers its result:
// plain JSON, or with Accept: application/x-ndjson, progress lines and
// then the result.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, call func(*hosted.CallOptions) (any, error)) {
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		res, err := call(nil)
		if err != nil {
			h.writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	line := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(v)
		if fl != nil {
			fl.Flush()
		}
	}
	res, err := call(&hosted.CallOptions{OnProgress: func(p hosted.Progress) {
		line(map[string]any{"progress": map[string]any{"progress": p.Progress, "total": p.Total, "message": p.Message}})
	}})
	if err != nil {
		line(map[string]any{"error": errorBody(err)})
		return
	}
	line(map[string]any{"result": res})
}

func errorBody(err error) map[string]any {
	body := map[string]any{"error_code": mcpbox.ErrorCode(err), "message": "internal error", "recovery_suggestions": mcpbox.ErrorSuggestions(err)}
	var e *mcpbox.Error
	if errors.As(err, &e) {
		body["message"] = e.Message
		if e.Context != nil {
			body["context"] = e.Context
		}
	}
	return body
}

// writeError answers a domain error with its HTTP status.
func (h *Handler) writeError(w http.ResponseWriter, err error) {
	code := mcpbox.ErrorCode(err)
	status := map[string]int{
		mcpbox.EINVALID: http.StatusBadRequest, mcpbox.ENOTFOUND: http.StatusNotFound, mcpbox.ESESSION: http.StatusNotFound,
		mcpbox.ELIMIT: http.StatusTooManyRequests, mcpbox.ETIMEOUT: http.StatusGatewayTimeout, mcpbox.EUNAVAILABLE: http.StatusServiceUnavailable,
		mcpbox.ECOMMAND: http.StatusBadGateway, mcpbox.ECREATE: http.StatusServiceUnavailable, mcpbox.EUNSUPPORTED: http.StatusNotImplemented,
		mcpbox.EUNAUTH: http.StatusUnauthorized,
	}[code]
	if status == 0 {
		status = http.StatusInternalServerError
		h.log.Error("hosted server call", "err", err)
	}
	writeJSON(w, status, errorBody(err))
}
