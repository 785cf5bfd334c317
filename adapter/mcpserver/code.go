package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// maxReply caps stdout and stderr each in a tool result. The kernel caps
// a cell's output at 1 MiB; a model's context is smaller still.
const maxReply = 100 << 10

type executeCodeIn struct {
	Code      string                `json:"code" jsonschema:"The code to run. State (variables, imports, functions) persists between calls in the same session. In Python the value of the last expression is returned as a result, as in a notebook."`
	Language  string                `json:"language,omitempty" jsonschema:"python (default), javascript (Node.js, top-level await works) or shell (bash)."`
	SessionID string                `json:"session_id,omitempty" jsonschema:"The session to run in, from an earlier call. Leave it out to start a new session; its id comes back as session_id."`
	Template  string                `json:"template,omitempty" jsonschema:"Sandbox template for a new session: default (the host's own /usr), or a template made with mcpbox template build, import, pull or commit (mcpbox template ls lists them); base and code-interpreter-v1 are aliases of default and code-interpreter."`
	Flavor    string                `json:"flavor,omitempty" jsonschema:"Size of a new session: small (1 CPU, 1 GiB), medium (2 CPU, 2 GiB), large (4 CPU, 4 GiB) or a flavor the server defines."`
	Timeout   float64               `json:"timeout,omitempty" jsonschema:"Seconds before the code is interrupted (1 to 3600). The session and its state survive a timeout."`
	Event     json.RawMessage       `json:"event,omitempty" jsonschema:"Handler mode (python or javascript): when given, the code defines handler(event, context) (in JavaScript also exports.handler or module.exports.handler; a handler this code defines wins over an earlier one); it is called with this JSON value and what it returns comes back as return_value."`
	Env       map[string]string     `json:"env,omitempty" jsonschema:"Environment variables for this execution (and for a new session)."`
	Network   *mcpbox.NetworkPolicy `json:"network,omitempty" jsonschema:"Network access: which hosts the session may reach over HTTP and HTTPS, e.g. {\"allow\": [\"pypi.org\", \"files.pythonhosted.org\"]}. Without it a new session has the server's default (usually no network); with session_id it replaces that session's policy."`
}

// codeError is an exception raised by the code.
type codeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// richResult is one displayed value: the last expression, a figure, a
// display() call. Images travel as MCP image content; images lists their
// MIME types so a client without image support still learns of them.
type richResult struct {
	Text         string   `json:"text,omitempty"`
	HTML         string   `json:"html,omitempty"`
	Markdown     string   `json:"markdown,omitempty"`
	LaTeX        string   `json:"latex,omitempty"`
	JSON         any      `json:"json,omitempty"`
	Images       []string `json:"images,omitempty"`
	IsMainResult bool     `json:"is_main_result,omitempty"`
}

type executeCodeOut struct {
	SessionID      string       `json:"session_id"`
	SessionCreated bool         `json:"session_created"`
	Language       string       `json:"language"`
	Stdout         string       `json:"stdout"`
	Stderr         string       `json:"stderr"`
	Results        []richResult `json:"results,omitempty"`
	Error          *codeError   `json:"error,omitempty"`
	ReturnValue    any          `json:"return_value,omitempty"`
	ExecutionCount int          `json:"execution_count,omitempty"`
	DurationMS     float64      `json:"duration_ms"`
	Truncated      bool         `json:"truncated"`
	// OmittedBytes counts the stdout and stderr bytes this result leaves
	// out (past maxReply each).
	OmittedBytes int64 `json:"omitted_bytes,omitempty"`
}

var imageTypes = map[string]string{"png": "image/png", "jpeg": "image/jpeg", "svg": "image/svg+xml"}

func executeCode() registrar {
	return &toolDef[executeCodeIn, executeCodeOut]{
		name:  "execute_code",
		title: "Run code",
		description: `Run Python, JavaScript or shell code in an isolated sandbox and get back stdout, stderr, the value of the last expression, rich results (plots come back as images) and any error with its traceback.
Use it for calculations, data analysis, plotting, trying out code, or anything that needs a real interpreter. Sessions are stateful: pass the session_id from an earlier result to keep variables, imports and files; leave it out to start a fresh session (its id is returned).
The sandbox has no network unless the server allows it. Files live under /workspace. If the code raises, the result is an error whose traceback says what went wrong; fix the code and call again in the same session.`,
		destructive: false,
		schema: func(s *jsonschema.Schema) {
			lang := s.Properties["language"]
			lang.Enum = []any{"python", "javascript", "shell"}
			lang.Default = json.RawMessage(`"python"`)
			timeoutSchema(s)
			s.Properties["event"] = &jsonschema.Schema{Description: s.Properties["event"].Description}
		},
		required: []string{"session_id", "stdout", "stderr"},
		run:      runCode,
		text:     codeText,
	}
}

func runCode(ctx context.Context, c *call, in *executeCodeIn) (*executeCodeOut, error) {
	lang, err := mcpbox.ParseLanguage(in.Language)
	if err != nil {
		return nil, err
	}
	if len(in.Event) > 0 && lang == mcpbox.Shell {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "event (handler mode) works with language python or javascript, not shell: shell code has no handler to call").
			With("argument", "event").With("tool", "execute_code").
			WithSuggestion("define handler(event, context) in Python or JavaScript and call again, or leave event out and pass input through env")
	}
	timeout := seconds(in.Timeout, 30)
	out := &executeCodeOut{Language: string(lang)}
	id, created, err := c.session(ctx, in.SessionID, manager.CreateRequest{Template: in.Template, Flavor: in.Flavor, Env: in.Env, Network: in.Network})
	if err != nil {
		return nil, err
	}
	out.SessionID, out.SessionCreated = id, created
	var stdout, stderr strings.Builder
	timedOut, restarted := false, false
	start := time.Now()
	err = c.s.opts.Manager.ExecuteCode(ctx, c.owner, id, manager.CodeRequest{
		Code: in.Code, Language: string(lang), Env: in.Env, Event: in.Event, Timeout: timeout,
	}, func(ev mcpbox.CodeEvent) {
		switch ev.Type {
		case mcpbox.EventStdout, mcpbox.EventStderr:
			b := &stdout
			if ev.Type == mcpbox.EventStderr {
				b = &stderr
			}
			if b.Len() < maxReply {
				b.WriteString(ev.Text)
			} else {
				out.Truncated = true
				out.OmittedBytes += int64(len(ev.Text))
			}
			c.output(ctx, ev.Type, ev.Text)
		case mcpbox.EventResult:
			out.Results = append(out.Results, c.richResult(ev.Result))
		case mcpbox.EventError:
			out.Error = &codeError{Name: ev.Error.Name, Value: ev.Error.Value, Traceback: ev.Error.Traceback}
		case mcpbox.EventReturnValue:
			out.ReturnValue = ev.Value
		case mcpbox.EventNumberOfExecutions:
			out.ExecutionCount = ev.ExecutionCount
		case mcpbox.EventEndOfExecution:
			timedOut, restarted = ev.TimedOut, ev.Restarted
		}
	})
	c.finishOutput(ctx)
	elapsed := time.Since(start)
	out.DurationMS = float64(elapsed.Microseconds()) / 1000
	out.OmittedBytes += int64(max(0, stdout.Len()-maxReply) + max(0, stderr.Len()-maxReply))
	out.Stdout, out.Stderr = clip(stdout.String(), &out.Truncated), clip(stderr.String(), &out.Truncated)
	if err != nil {
		return out, err
	}
	if out.Error == nil {
		return out, nil
	}
	// What became of the kernel's state, said once and truthfully: the
	// agent reports a restart on end_of_execution.
	state := "the session and its state are kept"
	if restarted {
		state = "the kernel had to be restarted, so its state (variables, imports) is lost; the session is kept"
	}
	if ctx.Err() != nil {
		return out, mcpbox.Errorf(mcpbox.ETIMEOUT, "the execution was cancelled; %s", state).
			With("session_id", id).With("state_lost", restarted)
	}
	// The kernel interrupts a cell at its timeout and says so; what the
	// code then reports (KeyboardInterrupt, exit 130) is the timeout's
	// doing.
	if timedOut {
		e := mcpbox.Errorf(mcpbox.ETIMEOUT, "the code ran past its timeout of %gs and was interrupted; %s", timeout.Seconds(), state).
			With("timeout_seconds", timeout.Seconds()).With("session_id", id).With("state_lost", restarted).
			WithSuggestion("raise timeout (up to 3600), or split the work into smaller calls")
		if restarted {
			e.WithSuggestion("re-run the setup code (imports, variables) before continuing")
		}
		return out, e
	}
	e := mcpbox.Errorf(mcpbox.ECODE, "the code raised %s: %s", out.Error.Name, out.Error.Value).
		With("session_id", id).With("error_name", out.Error.Name)
	switch out.Error.Name {
	case "KernelExited":
		e.Message = out.Error.Value
		e.WithSuggestion("the next call starts a fresh kernel: re-run the setup code (imports, variables) first")
	case "KernelRestarted", "KernelDied", "ContextDeleted":
		e.WithSuggestion("the kernel's state was lost: re-run the setup code (imports, variables) before continuing")
	case "ExitCode":
		e.Message = "the shell code ended with exit status " + out.Error.Value
		e.WithSuggestion("read stderr, fix the failing command and run it again")
	case "ModuleNotFoundError":
		if mod := MissingModule(out.Error.Value); mod != "" {
			e.With("module", mod)
			e.WithSuggestion(fmt.Sprintf("%s is not installed where the sandbox's Python looks: sandboxes of the default template see the server's own /usr, "+
				"so the server's operator installs it there (on Debian: apt-get install python3-%s; `mcpbox doctor` lists each language's libraries)", mod, strings.ToLower(mod)))
			e.WithSuggestion(fmt.Sprintf("or, when the session has network, install it into the session: execute_command `pip install --user %s`", mod))
		}
	}
	return out, e
}

// MissingModule finds the top-level module in a ModuleNotFoundError's
// value, "No module named 'pandas.core'" → "pandas".
func MissingModule(value string) string {
	_, rest, ok := strings.Cut(value, "No module named ")
	if !ok {
		return ""
	}
	name := strings.Trim(strings.TrimSpace(rest), `'"`)
	name, _, _ = strings.Cut(name, ".")
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return name
}

// richResult converts a kernel result, moving images into content.
func (c *call) richResult(res *mcpbox.CodeResult) richResult {
	r := richResult{Text: res.Text, HTML: res.HTML, Markdown: res.Markdown, LaTeX: res.LaTeX, IsMainResult: res.IsMainResult}
	if len(res.JSON) > 0 {
		r.JSON = res.JSON
	}
	for key, mime := range imageTypes {
		data := map[string]string{"png": res.PNG, "jpeg": res.JPEG, "svg": res.SVG}[key]
		if data == "" {
			continue
		}
		var raw []byte
		if key == "svg" {
			raw = []byte(data)
		} else {
			var err error
			if raw, err = base64.StdEncoding.DecodeString(data); err != nil {
				continue
			}
		}
		c.content = append(c.content, &mcp.ImageContent{Data: raw, MIMEType: mime})
		r.Images = append(r.Images, mime)
	}
	return r
}

func codeText(o *executeCodeOut) string {
	var b strings.Builder
	if o.Stdout != "" {
		b.WriteString(o.Stdout)
		if !strings.HasSuffix(o.Stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if o.Stderr != "" {
		fmt.Fprintf(&b, "[stderr]\n%s", o.Stderr)
		if !strings.HasSuffix(o.Stderr, "\n") {
			b.WriteString("\n")
		}
	}
	for _, r := range o.Results {
		switch {
		case len(r.Images) > 0:
			fmt.Fprintf(&b, "[%s attached]\n", strings.Join(r.Images, ", "))
		case r.Text != "":
			fmt.Fprintf(&b, "%s\n", r.Text)
		}
	}
	if o.ReturnValue != nil {
		rv, _ := json.Marshal(o.ReturnValue)
		fmt.Fprintf(&b, "return value: %s\n", rv)
	}
	if o.Error != nil {
		if o.Error.Traceback != "" {
			fmt.Fprintf(&b, "%s\n", strings.TrimRight(o.Error.Traceback, "\n"))
		} else {
			fmt.Fprintf(&b, "%s: %s\n", o.Error.Name, o.Error.Value)
		}
	}
	if o.Truncated {
		fmt.Fprintf(&b, "%s; %d more bytes were not shown]\n", strings.TrimSuffix(truncatedNote, "]"), o.OmittedBytes)
	}
	created := ""
	if o.SessionCreated {
		created = ", new session"
	}
	fmt.Fprintf(&b, "[session_id %s%s, %.0f ms]", o.SessionID, created, o.DurationMS)
	return b.String()
}

// session returns the session to run in: the named one, or a new one.
func (c *call) session(ctx context.Context, id string, req manager.CreateRequest) (string, bool, error) {
	if id != "" {
		if req.Network != nil {
			// Asked of a session that exists: its policy changes.
			if _, err := c.s.opts.Manager.SetNetwork(ctx, c.owner, id, req.Network); err != nil {
				return "", false, err
			}
		}
		return id, false, nil
	}
	if c.s.opts.RequireSessionID {
		return "", false, mcpbox.Errorf(mcpbox.EINVALID, "session_id is required on this server").
			WithSuggestion("create a session with create_session and pass its session_id")
	}
	s, err := c.s.opts.Manager.Create(ctx, c.owner, req)
	if err != nil {
		return "", false, err
	}
	return s.ID, true, nil
}

// truncatedNote ends output that was cut, naming the limit applied here.
// The sandbox's kernel keeps more (1 MiB a stream) and notes on stderr
// what it dropped beyond that.
var truncatedNote = fmt.Sprintf("[output truncated: this result shows the first %d KiB of stdout and of stderr]", maxReply>>10)

// truncatedTailNote ends background output that was cut to its end.
var truncatedTailNote = fmt.Sprintf("[output truncated: this result shows the last %d KiB of stdout and of stderr]", maxReply>>10)

// clipTail keeps the last maxReply bytes of s, starting on a rune.
func clipTail(s string, truncated *bool) string {
	if len(s) <= maxReply {
		return s
	}
	*truncated = true
	i := len(s) - maxReply
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// clip keeps the first maxReply bytes of s, without splitting a rune.
func clip(s string, truncated *bool) string {
	if len(s) <= maxReply {
		return s
	}
	*truncated = true
	s = s[:maxReply]
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				s = s[:i]
			}
			break
		}
	}
	return s
}

func seconds(v, def float64) time.Duration {
	if v == 0 {
		v = def
	}
	return time.Duration(v * float64(time.Second))
}

func str(v any) string { s, _ := v.(string); return s }

func ptr[T any](v T) *T { return &v }
