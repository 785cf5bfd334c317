package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
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
	b := &bearer{key: os.Getenv("MCPBOX_API_KEY")}
	hc := &http.Client{Transport: b}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpbox-cli", Version: mcpbox.Version}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: u.String(), HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		if refusal := b.refused(); refusal != "" {
			// The server is there: it turned the key down.
			if b.key == "" {
				return nil, mcpbox.Errorf(mcpbox.EUNAUTH, "mcpbox at %s needs an API key: %s", u, refusal).
					WithSuggestion("set MCPBOX_API_KEY to a key from `mcpbox key create --owner NAME` (run where the server runs)")
			}
			why := strings.TrimPrefix(refusal, "the API key was refused: ")
			return nil, mcpbox.Errorf(mcpbox.EUNAUTH, "mcpbox at %s refused the API key in MCPBOX_API_KEY: %s", u, why).
				WithSuggestion("check MCPBOX_API_KEY; `mcpbox key list` on the server shows which keys are live, and `mcpbox key create --owner NAME` makes a new one")
		}
		return nil, mcpbox.Errorf(mcpbox.EUNAVAILABLE, "cannot reach mcpbox at %s", u).Wrap(err).
			WithSuggestion("start it with `mcpbox serve`, or point MCPBOX_URL at it")
	}
	return cs, nil
}

// bearer sends the API key, and remembers a 401 so the CLI can tell a
// refused key from a server that is not there.
type bearer struct {
	key string

	mu      sync.Mutex
	refusal string // the server's message from its last 401
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var e struct {
			Message string `json:"message"`
		}
		msg := "401 Unauthorized"
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			msg = e.Message
		}
		b.mu.Lock()
		b.refusal = msg
		b.mu.Unlock()
	}
	return resp, err
}

func (b *bearer) refused() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refusal
}

// callTool calls a tool and decodes its structured result into out. A
// tool error becomes an *mcpbox.Error with the server's code and hints.
func callTool(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) error {
	_, err := callToolResult(ctx, cs, name, args, out)
	return err
}

// cliWords turns the tool names in a server's suggestions into the
// commands a CLI user types.
var cliWords = strings.NewReplacer(
	"get_sessions", "`mcpbox session ls`", "create_session", "`mcpbox session create`",
	"stop_session", "`mcpbox session rm`", "execute_code", "`mcpbox exec`",
	"call without session_id", "run without --session",
)

// callToolResult is callTool that also returns the result, for its
// content blocks (images).
func callToolResult(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) (*mcp.CallToolResult, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, err
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
		for i, sug := range te.Suggestions {
			te.Suggestions[i] = cliWords.Replace(sug)
		}
		return res, &mcpbox.Error{Code: te.Code, Message: te.Code + ": " + te.Message, Suggestions: te.Suggestions, Context: te.Context}
	}
	return res, nil
}

func (m *Main) sessionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Create, list and remove sessions on a running mcpbox serve (MCPBOX_URL, MCPBOX_API_KEY)",
	}
	var flavor, ttl string
	var env, allow, deny []string
	var template string
	var public bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a session and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vars, err := parseEnv(env)
			if err != nil {
				return err
			}
			var d time.Duration
			if ttl != "" {
				if d, err = mcpserver.ParseDuration(ttl); err != nil {
					return mcpbox.Errorf(mcpbox.EINVALID, "--ttl: %v", err)
				}
			}
			cs, err := dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			args := map[string]any{"flavor": flavor, "env": vars}
			if template != "" {
				args["template"] = template
			}
			if len(allow) > 0 || len(deny) > 0 || public {
				args["network"] = map[string]any{"allow": allow, "deny": deny, "public": public}
			}
			if d > 0 {
				args["ttl"] = d.Seconds()
			}
			var out struct {
				SessionID string `json:"session_id"`
			}
			res, err := callToolResult(cmd.Context(), cs, "create_session", args, &out)
			if err != nil {
				return err
			}
			fmt.Fprintln(m.Stdout, out.SessionID)
			// When it ends, and why, for the person; stdout stays the id
			// alone, for scripts.
			for _, c := range res.Content {
				if t, ok := c.(*mcp.TextContent); ok {
					fmt.Fprintln(m.Stderr, t.Text)
				}
			}
			return nil
		},
	}
	create.Flags().StringVar(&flavor, "flavor", "", "small, medium, large or a configured flavor")
	create.Flags().StringVar(&template, "template", "", "template to start from (mcpbox template ls); default: the host's own /usr")
	create.Flags().StringArrayVar(&allow, "allow", nil, "host pattern the session may reach over HTTP(S), e.g. pypi.org or *.example.com (repeatable)")
	create.Flags().StringArrayVar(&deny, "deny", nil, "host pattern the session may never reach; wins over --allow and --public (repeatable)")
	create.Flags().BoolVar(&public, "public", false, "let the session reach any public host")
	create.Flags().StringVar(&ttl, "ttl", "", "longest life of the session: seconds (7200) or a duration (2h, 90m); default: the server's")
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
			// EXPIRES is when the session ends if unused (the sooner of its
			// idle deadline and its ttl); ENDS BY is its ttl's end.
			fmt.Fprintln(tw, "ID\tFLAVOR\tCREATED\tLAST USED\tEXPIRES IF UNUSED\tENDS BY\tLANGUAGES")
			for _, s := range out.Sessions {
				langs, _ := json.Marshal(s["languages"])
				ends := s["ends_at"]
				if ends == nil {
					ends = "-"
				}
				fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%v\t%v\t%s\n", s["session_id"], s["flavor"], s["created"], s["last_used"], s["expires_at"], ends,
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
	var session, language, imageDir string
	var timeout time.Duration
	var keep bool
	cmd := &cobra.Command{
		Use:   "exec [--session ID] [--language L] CODE",
		Short: "Run code on a running mcpbox serve (MCPBOX_URL, MCPBOX_API_KEY); CODE - reads stdin",
		Long: `Run code in a session of a running mcpbox serve, over MCP. Without --session
the code runs in a new session, which is stopped afterwards; --keep keeps it
and prints its id on stderr, so the next exec can use it with --session.
stdout and stderr are the code's; a raised error prints its traceback and
exits 1. Images the code displays (plots) are written as files,
mcpbox-plot-N.png in the current directory or --image-dir, and their paths
printed on stderr.`,
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
			if keep && session != "" {
				return &usageError{fmt.Errorf("--keep is for a new session; --session %s is kept anyway", session)}
			}
			// The same checks, in the same words, as mcpbox run.
			if _, err := mcpbox.ParseLanguage(language); err != nil {
				return err
			}
			if err := mcpbox.ValidateTimeout(timeout); err != nil {
				return err
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
			res, callErr := callToolResult(cmd.Context(), cs, "execute_code", in, &out)
			if out.SessionCreated && !keep {
				// A one-off exec leaves nothing behind, even when the code
				// failed or the call was interrupted.
				defer func() {
					ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 30*time.Second)
					defer cancel()
					if err := callTool(ctx, cs, "stop_session", map[string]any{"session_id": out.SessionID}, nil); err != nil {
						fmt.Fprintf(m.Stderr, "mcpbox: could not stop session %s: %v\n", out.SessionID, err)
					}
				}()
			}
			fmt.Fprint(m.Stdout, out.Stdout)
			fmt.Fprint(m.Stderr, out.Stderr)
			for _, r := range out.Results {
				if r.IsMainResult && r.Text != "" && len(r.Images) == 0 {
					fmt.Fprintln(m.Stdout, r.Text)
				}
			}
			if res != nil {
				images := &imageWriter{dir: imageDir}
				for _, c := range res.Content {
					img, ok := c.(*mcp.ImageContent)
					if !ok {
						continue
					}
					path, err := images.write(img.MIMEType, img.Data)
					if err != nil {
						fmt.Fprintf(m.Stderr, "mcpbox: an %s result could not be written: %v\n", img.MIMEType, err)
						continue
					}
					fmt.Fprintf(m.Stderr, "mcpbox: %s written to %s\n", img.MIMEType, path)
				}
			}
			if out.SessionCreated && keep {
				fmt.Fprintf(m.Stderr, "session: %s\n", out.SessionID)
			}
			// Shell code that exits, and a kernel that exits, end exec with
			// their status, as mcpbox run does; anything else raised is 1.
			status := 1
			if out.Error != nil {
				switch n, err := strconv.Atoi(out.Error.Value); {
				case out.Error.Name == "ExitCode" && err == nil:
					status = n
				case out.Error.Name == "KernelExited" && exitStatus.MatchString(out.Error.Value):
					status, _ = strconv.Atoi(exitStatus.FindStringSubmatch(out.Error.Value)[1])
					fmt.Fprintln(m.Stderr, "mcpbox:", out.Error.Value)
				default:
					fmt.Fprint(m.Stderr, out.Error.Traceback)
					if out.Error.Traceback == "" {
						fmt.Fprintf(m.Stderr, "%s: %s\n", out.Error.Name, out.Error.Value)
					}
				}
			}
			switch mcpbox.ErrorCode(callErr) {
			case "":
				return nil
			case mcpbox.ECODE:
				if out.Error == nil {
					fmt.Fprintln(m.Stderr, "mcpbox:", callErr)
				} else if out.Error.Name == "ModuleNotFoundError" {
					for _, s := range mcpbox.ErrorSuggestions(callErr) {
						fmt.Fprintln(m.Stderr, "  hint:", s)
					}
				}
				return &exitError{status}
			case mcpbox.ETIMEOUT:
				fmt.Fprintln(m.Stderr, "mcpbox:", callErr)
				return &exitError{exitTimeout}
			}
			return callErr
		},
	}
	cmd.Flags().StringVarP(&session, "session", "s", "", "session id (default: a new session, stopped afterwards)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the new session and print its id on stderr")
	cmd.Flags().StringVarP(&language, "language", "l", "python", "python, javascript or shell")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "interrupt the code after this long")
	cmd.Flags().StringVar(&imageDir, "image-dir", "", "write images the code displays (plots) here (default: the current directory)")
	return cmd
}
