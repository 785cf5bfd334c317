package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// tools lists every tool, in the order tools/list shows them.
func (s *Server) tools() []registrar {
	return []registrar{
		executeCode(), executeCommand(), getCommandOutput(), stopCommand(),
		createSession(), getSessions(), stopSession(),
		readFile(), writeFile(), listFiles(), getVolumePath(),
	}
}

func timeoutSchema(s *jsonschema.Schema) {
	to := s.Properties["timeout"]
	to.Minimum, to.Maximum, to.Default = ptr(1.0), ptr(3600.0), json.RawMessage(`30`)
}

// --- commands ---

type executeCommandIn struct {
	Command    string            `json:"command" jsonschema:"A full shell line, run by bash: pipes, redirects, && and quotes work."`
	SessionID  string            `json:"session_id,omitempty" jsonschema:"The session to run in. Leave it out to start a new session; its id comes back as session_id."`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"Working directory; default /workspace."`
	Env        map[string]string `json:"env,omitempty" jsonschema:"Environment variables for this command."`
	Timeout    float64           `json:"timeout,omitempty" jsonschema:"Seconds before the command is killed (1 to 3600). With background, it still bounds the command's life."`
	Background bool              `json:"background,omitempty" jsonschema:"Start the command and return at once with a handle, for servers and long jobs; read its output with get_command_output and end it with stop_command."`
}

type executeCommandOut struct {
	SessionID      string  `json:"session_id"`
	SessionCreated bool    `json:"session_created"`
	Stdout         string  `json:"stdout,omitempty"`
	Stderr         string  `json:"stderr,omitempty"`
	ExitCode       *int    `json:"exit_code,omitempty"`
	Handle         string  `json:"handle,omitempty"`
	DurationMS     float64 `json:"duration_ms"`
	Truncated      bool    `json:"truncated"`
}

func executeCommand() registrar {
	return &toolDef[executeCommandIn, executeCommandOut]{
		name:  "execute_command",
		title: "Run a shell command",
		description: `Run a shell command line in a sandbox session and get back stdout, stderr and the exit code. Use it to install packages (pip install, npm install), inspect files (ls, cat, grep), run programs and tests, or use git.
Pass session_id to run where earlier code ran (same files, same installed packages). A non-zero exit code comes back as an error result with the output, so you can read what failed.
For servers and long jobs set background: true: you get a handle at once; poll get_command_output and end it with stop_command.`,
		destructive: true,
		schema:      timeoutSchema,
		required:    []string{"session_id"},
		run: func(ctx context.Context, c *call, in *executeCommandIn) (*executeCommandOut, error) {
			if strings.TrimSpace(in.Command) == "" {
				return nil, mcpbox.Errorf(mcpbox.EINVALID, "command is empty").WithSuggestion("pass a shell line, for example \"ls -la /workspace\"")
			}
			timeout := seconds(in.Timeout, 30)
			id, created, err := c.session(ctx, in.SessionID, manager.CreateRequest{Env: in.Env})
			if err != nil {
				return nil, err
			}
			out := &executeCommandOut{SessionID: id, SessionCreated: created}
			req := manager.CommandRequest{Command: in.Command, Cwd: in.Cwd, Env: in.Env, Timeout: timeout}
			start := time.Now()
			if in.Background {
				out.Handle, err = c.s.opts.Manager.StartCommand(ctx, c.owner, id, req)
				out.DurationMS = ms(time.Since(start))
				return out, err
			}
			res, err := c.s.opts.Manager.RunCommand(ctx, c.owner, id, req, func(stderr bool, b []byte) {
				name := "stdout"
				if stderr {
					name = "stderr"
				}
				c.output(ctx, name, strings.ToValidUTF8(string(b), "\uFFFD"))
			})
			c.finishOutput(ctx)
			out.DurationMS = ms(time.Since(start))
			if err != nil {
				if e, ok := err.(*mcpbox.Error); ok && e.Context["stdout"] != nil {
					out.Stdout = clip(str(e.Context["stdout"]), &out.Truncated)
					delete(e.Context, "stdout")
				}
				return out, err
			}
			out.Stdout = clip(strings.ToValidUTF8(string(res.Stdout), "\uFFFD"), &out.Truncated)
			out.Stderr = clip(strings.ToValidUTF8(string(res.Stderr), "\uFFFD"), &out.Truncated)
			out.ExitCode = &res.ExitCode
			if res.ExitCode != 0 {
				return out, mcpbox.Errorf(mcpbox.ECOMMAND, "the command exited with status %d", res.ExitCode).
					With("exit_code", res.ExitCode).With("session_id", id)
			}
			return out, nil
		},
		text: func(o *executeCommandOut) string {
			if o.Handle != "" {
				return fmt.Sprintf("started in the background: handle %s\n[session_id %s]", o.Handle, o.SessionID)
			}
			var b strings.Builder
			writeStreams(&b, o.Stdout, o.Stderr, o.Truncated)
			if o.ExitCode != nil {
				fmt.Fprintf(&b, "[exit code %d, session_id %s, %.0f ms]", *o.ExitCode, o.SessionID, o.DurationMS)
			} else {
				fmt.Fprintf(&b, "[session_id %s]", o.SessionID)
			}
			return b.String()
		},
	}
}

type handleIn struct {
	SessionID string `json:"session_id" jsonschema:"The session the command runs in."`
	Handle    string `json:"handle" jsonschema:"The handle execute_command returned."`
}

type commandOutputOut struct {
	SessionID    string `json:"session_id"`
	Handle       string `json:"handle"`
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	Done         bool   `json:"done"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	DroppedBytes int64  `json:"dropped_bytes,omitempty"`
	Truncated    bool   `json:"truncated"`
}

func getCommandOutput() registrar {
	return &toolDef[handleIn, commandOutputOut]{
		name:        "get_command_output",
		title:       "Read a background command's output",
		description: `Read everything a background command (started by execute_command with background: true) has printed so far, and whether it has ended and with which exit code. Call it again to see more. The sandbox keeps the last 1 MiB of each stream, and a result shows the last 100 KiB of each (dropped_bytes counts what the sandbox let go).`,
		readOnly:    true,
		required:    []string{"session_id", "handle", "done"},
		run: func(ctx context.Context, c *call, in *handleIn) (*commandOutputOut, error) {
			o, err := c.s.opts.Manager.CommandOutput(ctx, c.owner, in.SessionID, in.Handle)
			if err != nil {
				return nil, err
			}
			out := &commandOutputOut{SessionID: in.SessionID, Handle: in.Handle, Done: o.Done, DroppedBytes: o.Dropped}
			// The newest output is what a poller wants: the agent keeps
			// the last 1 MiB, and a result its last 100 KiB.
			out.Stdout = clipTail(strings.ToValidUTF8(string(o.Stdout), "\uFFFD"), &out.Truncated)
			out.Stderr = clipTail(strings.ToValidUTF8(string(o.Stderr), "\uFFFD"), &out.Truncated)
			if o.Done {
				out.ExitCode = &o.ExitCode
			}
			return out, nil
		},
		text: func(o *commandOutputOut) string {
			var b strings.Builder
			writeStreams(&b, o.Stdout, o.Stderr, false)
			if o.Truncated {
				b.WriteString(truncatedTailNote + "\n")
			}
			if o.Done {
				fmt.Fprintf(&b, "[ended with exit code %d]", *o.ExitCode)
			} else {
				b.WriteString("[still running]")
			}
			return b.String()
		},
	}
}

type okOut struct {
	SessionID string `json:"session_id"`
	Stopped   bool   `json:"stopped"`
	Handle    string `json:"handle,omitempty"`
}

func stopCommand() registrar {
	return &toolDef[handleIn, okOut]{
		name:        "stop_command",
		title:       "Stop a background command",
		description: `Kill a background command (and everything it started) by its handle. Its output stays readable with get_command_output.`,
		destructive: true,
		required:    []string{"session_id", "stopped"},
		run: func(ctx context.Context, c *call, in *handleIn) (*okOut, error) {
			if err := c.s.opts.Manager.StopCommand(ctx, c.owner, in.SessionID, in.Handle); err != nil {
				return nil, err
			}
			return &okOut{SessionID: in.SessionID, Handle: in.Handle, Stopped: true}, nil
		},
		text: func(o *okOut) string { return "stopped " + o.Handle },
	}
}

// --- sessions ---

type createSessionIn struct {
	Template string                `json:"template,omitempty" jsonschema:"Sandbox template: default (the host's own /usr), or a template made with mcpbox template build, import, pull or commit (mcpbox template ls lists them); base and code-interpreter-v1 are aliases of default and code-interpreter."`
	Flavor   string                `json:"flavor,omitempty" jsonschema:"small (1 CPU, 1 GiB; the default), medium (2 CPU, 2 GiB), large (4 CPU, 4 GiB) or a flavor the server defines."`
	Env      map[string]string     `json:"env,omitempty" jsonschema:"Environment variables every execution in the session sees."`
	TTL      durationArg           `json:"ttl,omitempty" jsonschema:"How long the session may live at most: seconds (7200) or a duration (\"2h\", \"90m\"); the server's default when left out. A session unused for the server's idle timeout ends sooner."`
	Network  *mcpbox.NetworkPolicy `json:"network,omitempty" jsonschema:"Network access: {\"allow\": [\"pypi.org\", \"*.githubusercontent.com\"]} lets the session reach those hosts over HTTP and HTTPS (ports 80 and 443 unless a pattern names one, like api.example.com:8443); {\"public\": true} any public host; deny wins over both. Left out: the server's default, usually no network."`
}

// sessionInfo is what a caller learns of one of its sessions.
type sessionInfo struct {
	SessionID string   `json:"session_id"`
	State     string   `json:"state"`
	Flavor    string   `json:"flavor"`
	Template  string   `json:"template"`
	Created   string   `json:"created"`
	LastUsed  string   `json:"last_used"`
	ExpiresAt string   `json:"expires_at"`
	Languages []string `json:"languages"`
	// Network is the session's policy in words ("none", "allow pypi.org").
	Network string `json:"network"`
	// Egress counts the session's traffic through the egress proxy.
	Egress *mcpbox.NetworkStats `json:"egress,omitempty"`

	// EndsAt is the session's hard end (its ttl); ExpiresAt is the
	// sooner of that and its idle deadline.
	EndsAt      string  `json:"ends_at,omitempty"`
	IdleTimeout float64 `json:"idle_timeout_seconds,omitempty"`
}

func info(s *mcpbox.Session, langs []string) sessionInfo {
	t := s.Template
	if t == "" {
		t = "default"
	}
	if langs == nil {
		langs = []string{}
	}
	i := sessionInfo{SessionID: s.ID, State: string(s.State), Flavor: s.Flavor.Name, Template: t,
		Created: s.Created.Format(time.RFC3339), LastUsed: s.LastUsed.Format(time.RFC3339),
		ExpiresAt: s.Deadline().Format(time.RFC3339), IdleTimeout: s.IdleTimeout.Seconds(), Languages: langs,
		Network: s.Network.String()}
	if !s.ExpiresAt.IsZero() {
		i.EndsAt = s.ExpiresAt.Format(time.RFC3339)
	}
	return i
}

func createSession() registrar {
	return &toolDef[createSessionIn, sessionInfo]{
		name:        "create_session",
		title:       "Create a session",
		description: `Start a new sandbox session and return its session_id. You rarely need this: execute_code and execute_command start a session when called without session_id. Use it to pick a larger flavor, set environment variables for every call, or choose how long the session lives.`,
		schema: func(s *jsonschema.Schema) {
			durationSchema(s, "ttl")
		},
		required: []string{"session_id", "state"},
		run: func(ctx context.Context, c *call, in *createSessionIn) (*sessionInfo, error) {
			ttl, err := in.TTL.duration("create_session", "ttl")
			if err != nil {
				return nil, err
			}
			s, err := c.s.opts.Manager.Create(ctx, c.owner, manager.CreateRequest{Template: in.Template, Flavor: in.Flavor, Env: in.Env, TTL: ttl, Network: in.Network})
			if err != nil {
				return nil, err
			}
			i := info(s, nil)
			return &i, nil
		},
		text: sessionCreatedText,
	}
}

type getSessionsIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"Only this session. Leave it out to list all your running sessions."`
}

type getSessionsOut struct {
	Sessions []sessionInfo `json:"sessions"`
}

func getSessions() registrar {
	return &toolDef[getSessionsIn, getSessionsOut]{
		name:        "get_sessions",
		title:       "List sessions",
		description: `List your running sandbox sessions: id, when created and last used, when each expires, flavor, state, and which languages hold live state (variables you defined). Use it to find a session_id to reuse.`,
		readOnly:    true,
		required:    []string{"sessions"},
		run: func(ctx context.Context, c *call, in *getSessionsIn) (*getSessionsOut, error) {
			m := c.s.opts.Manager
			var list []*mcpbox.Session
			if in.SessionID != "" {
				s, err := m.Get(ctx, c.owner, in.SessionID)
				if err != nil {
					return nil, err
				}
				list = []*mcpbox.Session{s}
			} else {
				var err error
				if list, err = m.List(ctx, c.owner, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}}); err != nil {
					return nil, err
				}
			}
			out := &getSessionsOut{Sessions: []sessionInfo{}}
			for _, s := range list {
				// A sandbox that cannot be asked still gets listed.
				langs, _ := m.Languages(ctx, c.owner, s.ID)
				i := info(s, langs)
				if st := m.NetworkStats(s.ID); st.Connections > 0 || st.Refused > 0 {
					i.Egress = &st
				}
				out.Sessions = append(out.Sessions, i)
			}
			return out, nil
		},
		text: func(o *getSessionsOut) string {
			if len(o.Sessions) == 0 {
				return "no running sessions"
			}
			var b strings.Builder
			for _, s := range o.Sessions {
				langs := strings.Join(s.Languages, ",")
				if langs == "" {
					langs = "-"
				}
				ends := s.EndsAt
				if ends == "" {
					ends = "-"
				}
				fmt.Fprintf(&b, "%s  %s  %s  created %s  last used %s  expires if unused %s  ends by %s  live state in: %s  network: %s",
					s.SessionID, s.State, s.Flavor, s.Created, s.LastUsed, s.ExpiresAt, ends, langs, s.Network)
				if e := s.Egress; e != nil {
					fmt.Fprintf(&b, " (%d connections, %d bytes in, %d out, %d refused)", e.Connections, e.BytesIn, e.BytesOut, e.Refused)
				}
				b.WriteString("\n")
			}
			return strings.TrimRight(b.String(), "\n")
		},
	}
}

type sessionIDIn struct {
	SessionID string `json:"session_id" jsonschema:"The session."`
}

func stopSession() registrar {
	return &toolDef[sessionIDIn, okOut]{
		name:        "stop_session",
		title:       "Stop a session",
		description: `End a session: its sandbox, processes, files and kernel state are gone. Stop sessions you are done with; stopping one twice is fine.`,
		destructive: true,
		required:    []string{"session_id", "stopped"},
		run: func(ctx context.Context, c *call, in *sessionIDIn) (*okOut, error) {
			if err := c.s.opts.Manager.Stop(ctx, c.owner, in.SessionID); err != nil {
				return nil, err
			}
			return &okOut{SessionID: in.SessionID, Stopped: true}, nil
		},
		text: func(o *okOut) string { return "session " + o.SessionID + " stopped" },
	}
}

// --- files ---

type readFileIn struct {
	SessionID string `json:"session_id" jsonschema:"The session."`
	Path      string `json:"path" jsonschema:"File path; relative paths are under /workspace."`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) for UTF-8 files, base64 for binary ones."`
}

type fileOut struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Content   string `json:"content,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
	Size      int    `json:"size"`
}

func encodingSchema(s *jsonschema.Schema) {
	e := s.Properties["encoding"]
	e.Enum = []any{"text", "base64"}
	e.Default = json.RawMessage(`"text"`)
}

func workspacePath(p string) string {
	if p != "" && !path.IsAbs(p) {
		return path.Join("/workspace", p)
	}
	return p
}

func readFile() registrar {
	return &toolDef[readFileIn, fileOut]{
		name:        "read_file",
		title:       "Read a file",
		description: `Read a file from a session's sandbox, as text or (for binary files) base64. Use it to look at files your code wrote.`,
		readOnly:    true,
		schema:      encodingSchema,
		required:    []string{"session_id", "path", "content"},
		run: func(ctx context.Context, c *call, in *readFileIn) (*fileOut, error) {
			p := workspacePath(in.Path)
			b, err := c.s.opts.Manager.ReadFile(ctx, c.owner, in.SessionID, p)
			if err != nil {
				return nil, err
			}
			out := &fileOut{SessionID: in.SessionID, Path: p, Encoding: in.Encoding, Size: len(b)}
			if in.Encoding == "base64" {
				out.Content = base64.StdEncoding.EncodeToString(b)
			} else {
				if !utf8.Valid(b) {
					return nil, mcpbox.Errorf(mcpbox.EINVALID, "%s is not UTF-8 text", p).With("path", p).
						WithSuggestion("read it with encoding: base64")
				}
				out.Content = string(b)
			}
			return out, nil
		},
		text: func(o *fileOut) string { return o.Content },
	}
}

type writeFileIn struct {
	SessionID string `json:"session_id" jsonschema:"The session."`
	Path      string `json:"path" jsonschema:"File path; relative paths are under /workspace. Missing directories are created."`
	Content   string `json:"content" jsonschema:"The whole new content of the file."`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default), or base64 for binary content."`
	Mode      string `json:"mode,omitempty" jsonschema:"Octal permissions such as 0755, for scripts you want to execute."`
}

func writeFile() registrar {
	return &toolDef[writeFileIn, fileOut]{
		name:        "write_file",
		title:       "Write a file",
		description: `Create or replace a file in a session's sandbox (parent directories are created). Use it to put data, scripts or config files where your code can read them.`,
		destructive: true,
		schema: func(s *jsonschema.Schema) {
			encodingSchema(s)
			s.Properties["mode"].Pattern = "^0?[0-7]{3}$"
		},
		required: []string{"session_id", "path", "size"},
		run: func(ctx context.Context, c *call, in *writeFileIn) (*fileOut, error) {
			p := workspacePath(in.Path)
			data := []byte(in.Content)
			if in.Encoding == "base64" {
				var err error
				if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
					return nil, mcpbox.Errorf(mcpbox.EINVALID, "content is not valid base64: %v", err).
						WithSuggestion("send standard base64 (with padding), or use encoding: text")
				}
			}
			m := c.s.opts.Manager
			if err := m.WriteFile(ctx, c.owner, in.SessionID, p, data); err != nil {
				return nil, err
			}
			if in.Mode != "" {
				mode, _ := strconv.ParseUint(in.Mode, 8, 32)
				res, err := m.RunCommand(ctx, c.owner, in.SessionID, manager.CommandRequest{
					Command: fmt.Sprintf("chmod %o -- %s", mode, shellQuote(p))}, nil)
				if err != nil {
					return nil, err
				}
				if res.ExitCode != 0 {
					return nil, mcpbox.Errorf(mcpbox.EINVALID, "chmod %s: %s", in.Mode, strings.TrimSpace(string(res.Stderr)))
				}
			}
			return &fileOut{SessionID: in.SessionID, Path: p, Size: len(data)}, nil
		},
		text: func(o *fileOut) string { return fmt.Sprintf("wrote %d bytes to %s", o.Size, o.Path) },
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type listFilesIn struct {
	SessionID string `json:"session_id" jsonschema:"The session."`
	Path      string `json:"path,omitempty" jsonschema:"Directory to list; default /workspace."`
	Depth     int    `json:"depth,omitempty" jsonschema:"How many levels deep to list (1 to 10); default 1."`
}

type fileEntry struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Mode     string `json:"mode"`
	Modified string `json:"modified,omitempty"`
}

type listFilesOut struct {
	SessionID string      `json:"session_id"`
	Path      string      `json:"path"`
	Entries   []fileEntry `json:"entries"`
}

func listFiles() registrar {
	return &toolDef[listFilesIn, listFilesOut]{
		name:        "list_files",
		title:       "List files",
		description: `List the files and directories under a path in a session's sandbox (default /workspace), with type, size and permissions; depth lists subdirectories too.`,
		readOnly:    true,
		schema: func(s *jsonschema.Schema) {
			d := s.Properties["depth"]
			d.Minimum, d.Maximum, d.Default = ptr(1.0), ptr(10.0), json.RawMessage(`1`)
			s.Properties["path"].Default = json.RawMessage(`"/workspace"`)
		},
		required: []string{"session_id", "entries"},
		run: func(ctx context.Context, c *call, in *listFilesIn) (*listFilesOut, error) {
			p := workspacePath(in.Path)
			list, err := c.s.opts.Manager.ListFiles(ctx, c.owner, in.SessionID, p, in.Depth)
			if err != nil {
				return nil, err
			}
			out := &listFilesOut{SessionID: in.SessionID, Path: p, Entries: []fileEntry{}}
			for _, e := range list {
				fe := fileEntry{Name: e.Name, Path: e.Path, Size: e.Size, Mode: e.Permissions, Type: "file"}
				switch e.Type {
				case mcpbox.FileSymlink:
					fe.Type = "symlink"
				case mcpbox.FileDirectory:
					fe.Type = "directory"
				}
				if !e.ModTime.IsZero() {
					fe.Modified = e.ModTime.UTC().Format(time.RFC3339)
				}
				out.Entries = append(out.Entries, fe)
			}
			return out, nil
		},
		text: func(o *listFilesOut) string {
			if len(o.Entries) == 0 {
				return o.Path + " is empty"
			}
			var b strings.Builder
			for _, e := range o.Entries {
				name := e.Path
				if e.Type == "directory" {
					name += "/"
				}
				fmt.Fprintf(&b, "%s %10d  %s\n", e.Mode, e.Size, name)
			}
			return strings.TrimRight(b.String(), "\n")
		},
	}
}

type volumePathIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"A session whose volumes to show. Leave it out for the volumes every new session gets."`
}

type volumeOut struct {
	SandboxPath string `json:"sandbox_path"`
	HostPath    string `json:"host_path"`
	ReadOnly    bool   `json:"read_only"`
}

type volumePathOut struct {
	Volumes []volumeOut `json:"volumes"`
}

func getVolumePath() registrar {
	return &toolDef[volumePathIn, volumePathOut]{
		name:        "get_volume_path",
		title:       "Show volume mappings",
		description: `Show which host directories are mounted into the sandbox and where (sandbox_path), and whether they are read-only. Files written there from code are visible on the host and survive the session.`,
		readOnly:    true,
		required:    []string{"volumes"},
		run: func(ctx context.Context, c *call, in *volumePathIn) (*volumePathOut, error) {
			m := c.s.opts.Manager
			vols := m.DefaultVolumes()
			if in.SessionID != "" {
				var err error
				if vols, err = m.Volumes(ctx, c.owner, in.SessionID); err != nil {
					return nil, err
				}
			}
			out := &volumePathOut{Volumes: []volumeOut{}}
			for _, v := range vols {
				out.Volumes = append(out.Volumes, volumeOut{SandboxPath: v.SandboxPath, HostPath: v.HostPath, ReadOnly: v.ReadOnly})
			}
			return out, nil
		},
		text: func(o *volumePathOut) string {
			if len(o.Volumes) == 0 {
				return "no volumes are mapped"
			}
			var b strings.Builder
			for _, v := range o.Volumes {
				ro := ""
				if v.ReadOnly {
					ro = " (read-only)"
				}
				fmt.Fprintf(&b, "%s -> %s%s\n", v.HostPath, v.SandboxPath, ro)
			}
			return strings.TrimRight(b.String(), "\n")
		},
	}
}

// writeStreams renders stdout and stderr for a text block.
func writeStreams(b *strings.Builder, stdout, stderr string, truncated bool) {
	if stdout != "" {
		b.WriteString(stdout)
		if !strings.HasSuffix(stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if stderr != "" {
		b.WriteString("[stderr]\n" + stderr)
		if !strings.HasSuffix(stderr, "\n") {
			b.WriteString("\n")
		}
	}
	if truncated {
		b.WriteString(truncatedNote + "\n")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
