package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/httpserver"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/template"
)

// The tools commands discover and call a hosted server's tools: in this
// process (a sandbox made for the call, stopped after it), or through a
// running serve when MCPBOX_URL is set (its warm servers, your key's
// owner).

// hostedStack runs hosted servers in this process.
type hostedStack struct {
	h     *hosted.Hosts
	close func()
}

// openHosted opens the local stack and Hosts on servers.json.
func (m *Main) openHosted(cmd *cobra.Command, f *serversFlags) (*hostedStack, error) {
	c, err := m.loadConfig(cmd, &configFlags{file: f.config})
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := m.open(cmd.Context(), c, log, stackOptions{})
	if err != nil {
		return nil, err
	}
	h, err := hosted.New(&hosted.Options{Manager: s.mgr, File: c.ServersFile, Logger: log, Templates: hostedTemplates{s.rt}})
	if err != nil {
		s.close()
		return nil, err
	}
	return &hostedStack{h: h, close: func() { h.Close(); s.close() }}, nil
}

// hostedTemplates caches hosted servers' installs in the local runtime's
// template store.
type hostedTemplates struct{ rt *local.Runtime }

func (t hostedTemplates) Exists(_ context.Context, name string) bool {
	s, err := t.rt.Templates()
	if err != nil {
		return false
	}
	_, err = s.Get(name)
	return err == nil
}

func (t hostedTemplates) Commit(ctx context.Context, id, name string, progress func(string)) error {
	s, err := t.rt.Templates()
	if err != nil {
		return err
	}
	parent, err := t.rt.SandboxTemplate(id)
	if err != nil {
		return err
	}
	upper, err := t.rt.UpperDir(ctx, id)
	if err != nil {
		return err
	}
	_, err = s.Commit(ctx, name, parent, upper, template.Progress(progress))
	return err
}

// printProgress shows a start-up's and a tool's progress on stderr.
func (m *Main) printProgress(p hosted.Progress) {
	switch {
	case p.Total > 0 && p.Message != "":
		fmt.Fprintf(m.Stderr, "… [%g/%g] %s\n", p.Progress, p.Total, p.Message)
	case p.Total > 0:
		fmt.Fprintf(m.Stderr, "… [%g/%g]\n", p.Progress, p.Total)
	case p.Message != "":
		fmt.Fprintf(m.Stderr, "… %s\n", p.Message)
	}
}

func toolViews(server string, tools []*mcp.Tool) []httpserver.ToolView {
	out := make([]httpserver.ToolView, 0, len(tools))
	for _, t := range tools {
		out = append(out, httpserver.ToolView{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, ServerName: server})
	}
	return out
}

func (m *Main) toolsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tools", Short: "Discover and call the tools of hosted MCP servers"}
	cmd.AddCommand(m.toolsListCommand(), m.toolsExecuteCommand())
	return cmd
}

func (m *Main) toolsListCommand() *cobra.Command {
	var f serversFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list SERVER",
		Short: "List a hosted server's tools (starting it if needed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tools []httpserver.ToolView
			if rc := restClient(); rc != nil {
				var out struct {
					Tools []httpserver.ToolView `json:"tools"`
				}
				if err := rc.stream(cmd.Context(), "GET", "/v1/servers/"+url.PathEscape(args[0])+"/tools", nil, &out, m.printProgress); err != nil {
					return err
				}
				tools = out.Tools
			} else {
				st, err := m.openHosted(cmd, &f)
				if err != nil {
					return err
				}
				defer st.close()
				list, err := st.h.Tools(cmd.Context(), mcpbox.LocalOwner, args[0], &hosted.CallOptions{OnProgress: m.printProgress})
				if err != nil {
					return err
				}
				tools = toolViews(args[0], list)
			}
			if asJSON {
				return writeIndented(m.Stdout, tools)
			}
			if len(tools) == 0 {
				fmt.Fprintf(m.Stdout, "No tools found for server '%s'\n", args[0])
				return nil
			}
			fmt.Fprintf(m.Stdout, "Tools from '%s' (%d found):\n%s\n", args[0], len(tools), strings.Repeat("=", 50))
			for _, t := range tools {
				fmt.Fprintf(m.Stdout, "\n%s\n   %s\n", t.Name, strings.ReplaceAll(strings.TrimSpace(t.Description), "\n", "\n   "))
				printParams(m.Stdout, t.InputSchema)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: name, description, input_schema, server_name")
	return cmd
}

// printParams lists a schema's properties, required ones first.
func printParams(w io.Writer, schema any) {
	b, _ := json.Marshal(schema)
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(b, &s) != nil || len(s.Properties) == 0 {
		return
	}
	fmt.Fprintln(w, "   Parameters:")
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	for _, pass := range []bool{true, false} {
		for _, name := range sortedKeys(s.Properties) {
			if req[name] != pass {
				continue
			}
			typ := "any"
			if s.Properties[name].Type != nil {
				typ = fmt.Sprint(s.Properties[name].Type)
			}
			what := "optional"
			if pass {
				what = "required"
			}
			fmt.Fprintf(w, "     • %s (%s) - %s\n", name, typ, what)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// toolParams builds a call's arguments from --params and --param: a
// --param value that parses as JSON is that value, else a string.
func toolParams(params string, param []string) (map[string]any, error) {
	out := map[string]any{}
	if params != "" {
		if err := json.Unmarshal([]byte(params), &out); err != nil || out == nil {
			return nil, &usageError{fmt.Errorf("--params is not a JSON object: %q", params)}
		}
	}
	for _, p := range param {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, &usageError{fmt.Errorf("--param %q is not key=value", p)}
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		out[k] = val
	}
	return out, nil
}

// printResult prints a tool's result: its JSON, or its text. An isError
// result exits 1.
func (m *Main) printResult(res *mcp.CallToolResult, asJSON bool, header string) error {
	if asJSON {
		if err := writeIndented(m.Stdout, res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(m.Stderr, "%s\n%s\n", header, strings.Repeat("=", 40))
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				fmt.Fprintln(m.Stdout, tc.Text)
				continue
			}
			b, _ := json.Marshal(c)
			fmt.Fprintln(m.Stdout, string(b))
		}
		if len(res.Content) == 0 && res.StructuredContent != nil {
			writeIndented(m.Stdout, res.StructuredContent)
		}
	}
	if res.IsError {
		fmt.Fprintln(m.Stderr, "mcpbox: the tool reported an error")
		return &exitError{1}
	}
	return nil
}

func (m *Main) toolsExecuteCommand() *cobra.Command {
	var f serversFlags
	var params string
	var param []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "execute SERVER TOOL",
		Short: "Call a tool of a hosted server",
		Example: `  mcpbox tools execute filesystem list_directory --params '{"path": "/workspace"}'
  mcpbox tools execute memory create_entities --param entities='[{"name":"a","entityType":"t","observations":[]}]'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := toolParams(params, param)
			if err != nil {
				return err
			}
			var res *mcp.CallToolResult
			if rc := restClient(); rc != nil {
				res, err = rc.call(cmd.Context(), "/v1/servers/"+url.PathEscape(args[0])+"/tools/"+url.PathEscape(args[1]), in, m.printProgress)
			} else {
				st, oerr := m.openHosted(cmd, &f)
				if oerr != nil {
					return oerr
				}
				defer st.close()
				res, err = st.h.Call(cmd.Context(), mcpbox.LocalOwner, args[0], args[1], in, &hosted.CallOptions{OnProgress: m.printProgress})
			}
			if err != nil {
				return err
			}
			return m.printResult(res, asJSON, fmt.Sprintf("Executed %s on %s", args[1], args[0]))
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&params, "params", "", "the arguments as a JSON object")
	cmd.Flags().StringArrayVar(&param, "param", nil, "key=value; a value that parses as JSON is taken as JSON (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw result as JSON")
	return cmd
}

// rest is a client of a running serve's /v1 routes.
type rest struct {
	base string
	key  string
	hc   *http.Client
}

// restClient returns a client of MCPBOX_URL, or nil when it is unset.
func restClient() *rest {
	raw := os.Getenv("MCPBOX_URL")
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return &rest{base: raw}
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/mcp"), "/")
	return &rest{base: u.String(), key: os.Getenv("MCPBOX_API_KEY"), hc: &http.Client{}}
}

// do sends a request and decodes a JSON answer into out.
func (r *rest) do(ctx context.Context, method, path string, body, out any, _ func(hosted.Progress)) error {
	resp, err := r.send(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out)
}

func (r *rest) send(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	u, err := url.Parse(r.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &usageError{fmt.Errorf("MCPBOX_URL=%q is not an http(s) URL such as http://127.0.0.1:8080", r.base)}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "cannot reach mcpbox at %s", r.base).Wrap(err).
			WithSuggestion("start it with `mcpbox serve`, or point MCPBOX_URL at it (unset it to run servers in this process)")
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, restError(resp)
	}
	return resp, nil
}

// restError turns an error answer into the domain error it carries.
func restError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e struct {
		Code        string         `json:"error_code"`
		Message     string         `json:"message"`
		Suggestions []string       `json:"recovery_suggestions"`
		Context     map[string]any `json:"context"`
	}
	if json.Unmarshal(b, &e) != nil || e.Code == "" {
		return mcpbox.Errorf(mcpbox.EINTERNAL, "mcpbox answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return &mcpbox.Error{Code: e.Code, Message: e.Message, Suggestions: e.Suggestions, Context: e.Context}
}

// call posts a tool call and follows its NDJSON stream: progress lines,
// then the result or an error.
func (r *rest) call(ctx context.Context, path string, body any, onProgress func(hosted.Progress)) (*mcp.CallToolResult, error) {
	var res mcp.CallToolResult
	if err := r.stream(ctx, "POST", path, body, &res, onProgress); err != nil {
		return nil, err
	}
	return &res, nil
}

// stream sends a request for an NDJSON answer: progress lines, then the
// result (decoded into out) or an error.
func (r *rest) stream(ctx context.Context, method, path string, body, out any, onProgress func(hosted.Progress)) error {
	resp, err := r.send(ctx, method, path, body, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var line struct {
			Progress *hosted.Progress `json:"progress"`
			Result   json.RawMessage  `json:"result"`
			Error    *struct {
				Code        string         `json:"error_code"`
				Message     string         `json:"message"`
				Suggestions []string       `json:"recovery_suggestions"`
				Context     map[string]any `json:"context"`
			} `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return mcpbox.Errorf(mcpbox.EINTERNAL, "mcpbox sent a line that is not JSON: %v", err)
		}
		switch {
		case line.Progress != nil && onProgress != nil:
			onProgress(*line.Progress)
		case line.Result != nil:
			if err := json.Unmarshal(line.Result, out); err != nil {
				return mcpbox.Errorf(mcpbox.EINTERNAL, "mcpbox sent a result this client does not read: %v", err)
			}
			return nil
		case line.Error != nil:
			return &mcpbox.Error{Code: line.Error.Code, Message: line.Error.Message, Suggestions: line.Error.Suggestions, Context: line.Error.Context}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return mcpbox.Errorf(mcpbox.EINTERNAL, "mcpbox ended the answer without a result")
}
