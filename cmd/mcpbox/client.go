package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
)

// The session and exec commands are an MCP client of a running serve:
// the CLI uses the same tools an agent does, so there is no second API.

// dial connects to MCPBOX_URL (default http://127.0.0.1:8080) with
// MCPBOX_API_KEY, if set.
func dial(ctx context.Context) (*mcp.ClientSession, error) {
	raw := os.Getenv("MCPBOX_URL")
	if raw == "" {
		raw = "http://127.0.0.1:8080"
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &usageError{fmt.Errorf("MCPBOX_URL=%q is not an http(s) URL such as http://127.0.0.1:8080", raw)}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/mcp"
	}
	hc := &http.Client{Transport: bearer{key: os.Getenv("MCPBOX_API_KEY")}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpbox-cli", Version: mcpbox.Version}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: u.String(), HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "cannot reach mcpbox at %s", u).Wrap(err).
			WithSuggestion("start it with `mcpbox serve`, or point MCPBOX_URL at it; set MCPBOX_API_KEY if it needs a key")
	}
	return cs, nil
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// callTool calls a tool and decodes its structured result into out. A
// tool error becomes an *mcpbox.Error with the server's code and hints.
func callTool(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err
	}
	b, _ := json.Marshal(res.StructuredContent)
	if out != nil {
		json.Unmarshal(b, out)
	}
	if res.IsError {
		var te struct {
			Code        string         `json:"error_code"`
			Message     string         `json:"message"`
			Suggestions []string       `json:"recovery_suggestions"`
			Context     map[string]any `json:"context"`
		}
		json.Unmarshal(b, &te)
		return &mcpbox.Error{Code: te.Code, Message: te.Code + ": " + te.Message, Suggestions: te.Suggestions, Context: te.Context}
	}
	return nil
}

func (m *Main) sessionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Create, list and remove sessions on a running mcpbox serve (MCPBOX_URL, MCPBOX_API_KEY)",
	}
	var flavor string
	var ttl time.Duration
	var env []string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a session and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vars, err := parseEnv(env)
			if err != nil {
				return err
			}
			cs, err := dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			args := map[string]any{"flavor": flavor, "env": vars}
			if ttl > 0 {
				args["ttl"] = ttl.Seconds()
			}
			var out struct {
				SessionID string `json:"session_id"`
			}
			if err := callTool(cmd.Context(), cs, "create_session", args, &out); err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, out.SessionID)
			return nil
		},
	}
	create.Flags().StringVar(&flavor, "flavor", "", "small, medium, large or a configured flavor")
	create.Flags().DurationVar(&ttl, "ttl", 0, "longest life of the session, such as 2h (default: the server's)")
	create.Flags().StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE for every execution (repeatable)")

	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your running sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			var out struct {
				Sessions []map[string]any `json:"sessions"`
			}
			if err := callTool(cmd.Context(), cs, "get_sessions", map[string]any{}, &out); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(m.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out.Sessions)
			}
			tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tFLAVOR\tCREATED\tLAST USED\tEXPIRES\tLANGUAGES")
			for _, s := range out.Sessions {
				langs, _ := json.Marshal(s["languages"])
				fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%v\t%s\n", s["session_id"], s["flavor"], s["created"], s["last_used"], s["expires_at"],
					strings.Trim(strings.ReplaceAll(string(langs), `"`, ""), "[]"))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Stop sessions",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			cs, err := dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			for _, id := range ids {
				if err := callTool(cmd.Context(), cs, "stop_session", map[string]any{"session_id": id}, nil); err != nil {
					return err
				}
				fmt.Fprintln(m.Stdout, id)
			}
			return nil
		},
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}

func (m *Main) execCommand() *cobra.Command {
	var session, language string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "exec [--session ID] [--language L] CODE",
		Short: "Run code on a running mcpbox serve (MCPBOX_URL, MCPBOX_API_KEY); CODE - reads stdin",
		Long: `Run code in a session of a running mcpbox serve, over MCP. Without --session a
new session is made and its id printed to stderr, so the next exec can reuse it.
stdout and stderr are the code's; a raised error prints its traceback and
exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code := args[0]
			if code == "-" {
				b, err := io.ReadAll(m.Stdin)
				if err != nil {
					return err
				}
				code = string(b)
			}
			cs, err := dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			in := map[string]any{"code": code, "language": language, "timeout": timeout.Seconds()}
			if session != "" {
				in["session_id"] = session
			}
			var out struct {
				SessionID      string `json:"session_id"`
				SessionCreated bool   `json:"session_created"`
				Stdout, Stderr string
				Results        []struct {
					Text         string   `json:"text"`
					Images       []string `json:"images"`
					IsMainResult bool     `json:"is_main_result"`
				}
				Error *struct{ Name, Value, Traceback string }
			}
			callErr := callTool(cmd.Context(), cs, "execute_code", in, &out)
			fmt.Fprint(m.Stdout, out.Stdout)
			fmt.Fprint(m.Stderr, out.Stderr)
			for _, r := range out.Results {
				switch {
				case len(r.Images) > 0:
					fmt.Fprintf(m.Stderr, "[%s result not shown]\n", strings.Join(r.Images, ", "))
				case r.IsMainResult && r.Text != "":
					fmt.Fprintln(m.Stdout, r.Text)
				}
			}
			if out.SessionCreated {
				fmt.Fprintf(m.Stderr, "session: %s\n", out.SessionID)
			}
			if out.Error != nil {
				fmt.Fprint(m.Stderr, out.Error.Traceback)
				if out.Error.Traceback == "" {
					fmt.Fprintf(m.Stderr, "%s: %s\n", out.Error.Name, out.Error.Value)
				}
			}
			switch mcpbox.ErrorCode(callErr) {
			case "":
				return nil
			case mcpbox.ECODE:
				return &exitError{1}
			case mcpbox.ETIMEOUT:
				fmt.Fprintln(m.Stderr, "mcpbox:", callErr)
				return &exitError{exitTimeout}
			}
			return callErr
		},
	}
	cmd.Flags().StringVarP(&session, "session", "s", "", "session id (default: a new session)")
	cmd.Flags().StringVarP(&language, "language", "l", "python", "python, javascript or shell")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "interrupt the code after this long")
	return cmd
}
