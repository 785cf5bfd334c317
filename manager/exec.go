package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/gen/filesystempb"
)

// CommandRequest is a shell line, or a program and its arguments, to run
// in a session.
type CommandRequest struct {
	// Command is a whole shell line: pipes, redirects and && work.
	Command string
	// Args, when Command is empty, is a program and its arguments, run as
	// they are with no shell.
	Args []string
	Cwd  string
	Env  map[string]string
	// Timeout kills the command when it passes; 0 means 30s.
	Timeout time.Duration
}

// CommandResult is how a command ended.
type CommandResult struct {
	// Stdout and Stderr are the first Options.MaxOutputBytes of each;
	// StdoutDropped and StderrDropped count what came after.
	Stdout, Stderr               []byte
	StdoutDropped, StderrDropped int64
	ExitCode                     int
	// Exited is false when a signal ended the command; Status then says
	// which ("signal: killed").
	Exited   bool
	Status   string
	Duration time.Duration
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	buf     bytes.Buffer
	max     int64
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - int64(c.buf.Len())
	switch {
	case room <= 0:
		c.dropped += int64(len(p))
	case int64(len(p)) > room:
		c.buf.Write(p[:room])
		c.dropped += int64(len(p)) - room
	default:
		c.buf.Write(p)
	}
	return len(p), nil
}

// RunCommand runs req in owner's session and returns once it ended. The
// session's env and req.Env reach the command; output also streams to
// onOutput (if set) as it comes.
func (m *Manager) RunCommand(ctx context.Context, owner, id string, req CommandRequest, onOutput func(stderr bool, b []byte)) (*CommandResult, error) {
	argv := []string{"/bin/bash", "-c", req.Command}
	if req.Command == "" {
		if len(req.Args) == 0 || req.Args[0] == "" {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "command is empty").WithSuggestion("pass the shell line to run")
		}
		argv = req.Args
	}
	if req.Timeout == 0 {
		req.Timeout = 30 * time.Second
	}
	if err := mcpbox.ValidateTimeout(req.Timeout); err != nil {
		return nil, err
	}
	s, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if req.Command != "" {
		argv[0] = m.shell(ctx, s)
	}
	release, err := m.acquire(id, c)
	if err != nil {
		return nil, err
	}
	defer release()
	out, errb := &capped{max: m.opts.MaxOutputBytes}, &capped{max: m.opts.MaxOutputBytes}
	stdout, stderr := io.Writer(out), io.Writer(errb)
	if onOutput != nil {
		stdout = io.MultiWriter(out, writerFunc(func(b []byte) { onOutput(false, b) }))
		stderr = io.MultiWriter(errb, writerFunc(func(b []byte) { onOutput(true, b) }))
	}
	rctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	start := time.Now()
	res, err := c.client.Run(rctx, agentclient.Command{Cmd: argv[0], Args: argv[1:],
		Env: mergeEnv(s.Env, req.Env), Cwd: req.Cwd}, stdout, stderr)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			return nil, mcpbox.Errorf(mcpbox.ETIMEOUT, "the command ran past its timeout of %s and was killed", req.Timeout).
				With("timeout_seconds", req.Timeout.Seconds()).With("stdout", out.buf.String()).
				WithSuggestion("raise the timeout, or run it with background: true")
		}
		return nil, m.callError(ctx, id, err)
	}
	return &CommandResult{Stdout: out.buf.Bytes(), Stderr: errb.buf.Bytes(), StdoutDropped: out.dropped, StderrDropped: errb.dropped,
		ExitCode: res.ExitCode, Exited: res.Exited, Status: res.Status, Duration: time.Since(start)}, nil
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

func mergeEnv(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// ReadFile returns a file of owner's session, up to Options.MaxFileBytes:
// a larger one is refused, not truncated, and never buffered whole.
func (m *Manager) ReadFile(ctx context.Context, owner, id, path string) ([]byte, error) {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	rc, err := c.client.Download(ctx, path)
	if err != nil {
		return nil, m.callError(ctx, id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, m.opts.MaxFileBytes+1))
	if err != nil {
		return nil, m.callError(ctx, id, err)
	}
	if int64(len(b)) > m.opts.MaxFileBytes {
		return nil, mcpbox.Errorf(mcpbox.ELIMIT, "%s is larger than the %d bytes a file read returns", path, m.opts.MaxFileBytes).
			With("limit_bytes", m.opts.MaxFileBytes).
			WithSuggestion("read part of it with a command (head -c, tail -c, sed -n), or compress it first")
	}
	return b, nil
}

// WriteFile writes a file in owner's session, creating parents.
func (m *Manager) WriteFile(ctx context.Context, owner, id, path string, data []byte) error {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return err
	}
	return m.callError(ctx, id, c.client.Upload(ctx, path, bytes.NewReader(data)))
}

// ListFiles lists a directory of owner's session, depth levels deep.
func (m *Manager) ListFiles(ctx context.Context, owner, id, path string, depth int) ([]mcpbox.FileInfo, error) {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Filesystem.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: path, Depth: uint32(max(depth, 1))}))
	if err != nil {
		return nil, m.callError(ctx, id, err)
	}
	out := make([]mcpbox.FileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		fi := mcpbox.FileInfo{Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(), Mode: e.GetMode(), Permissions: e.GetPermissions(),
			SymlinkTarget: e.GetSymlinkTarget(), Type: mcpbox.FileOther}
		if t := e.GetModifiedTime(); t != nil {
			fi.ModTime = t.AsTime()
		}
		switch e.GetType() {
		case filesystempb.FileType_FILE_TYPE_FILE:
			fi.Type = mcpbox.FileRegular
		case filesystempb.FileType_FILE_TYPE_DIRECTORY:
			fi.Type = mcpbox.FileDirectory
		}
		if fi.SymlinkTarget != "" {
			fi.Type = mcpbox.FileSymlink
		}
		out = append(out, fi)
	}
	return out, nil
}

// callError maps a failed call to session id's agent to a domain error.
// A failure the agent did not answer with (a dropped connection, a refused
// dial) may mean the sandbox died: then the session ends and the error
// says so.
func (m *Manager) callError(ctx context.Context, id string, err error) error {
	if err == nil {
		return nil
	}
	mapped := agentError(err)
	if mcpbox.ErrorCode(mapped) == mcpbox.EINTERNAL && ctx.Err() == nil {
		if gone := m.sandboxGone(context.WithoutCancel(ctx), id); gone != nil {
			return gone
		}
	}
	return mapped
}

// agentError maps what the agent answered to a domain error.
func agentError(err error) error {
	if err == nil {
		return nil
	}
	// An Error from the door itself (the sandbox is gone) says it best.
	var me *mcpbox.Error
	if errors.As(err, &me) {
		return me
	}
	var he *agentclient.HTTPError
	if errors.As(err, &he) {
		switch he.Status {
		case http.StatusNotFound:
			return mcpbox.Errorf(mcpbox.ENOTFOUND, "%s", he.Message).Wrap(err)
		case http.StatusBadRequest:
			return mcpbox.Errorf(mcpbox.EINVALID, "%s", he.Message).Wrap(err)
		case http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage:
			return mcpbox.Errorf(mcpbox.ELIMIT, "%s", he.Message).Wrap(err).
				WithSuggestion("write less, or use a larger flavor")
		}
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return mcpbox.Errorf(mcpbox.ENOTFOUND, "%s", connectMessage(err)).Wrap(err)
	case connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		return mcpbox.Errorf(mcpbox.EINVALID, "%s", connectMessage(err)).Wrap(err)
	case connect.CodeDeadlineExceeded:
		return mcpbox.Errorf(mcpbox.ETIMEOUT, "%s", connectMessage(err)).Wrap(err)
	case connect.CodeResourceExhausted:
		return mcpbox.Errorf(mcpbox.ELIMIT, "%s", connectMessage(err)).Wrap(err)
	}
	return mcpbox.Errorf(mcpbox.EINTERNAL, "sandbox agent").Wrap(err)
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// WarmPython starts a sandbox's default Python context through rt by
// running an empty cell, so the first real execution finds a live kernel.
func WarmPython(ctx context.Context, rt http.RoundTripper) error {
	var failed *mcpbox.CodeError
	err := agentclient.New(rt).Execute(ctx, agentclient.ExecuteRequest{Code: "pass", Language: "python"}, func(ev mcpbox.CodeEvent) {
		if ev.Error != nil {
			failed = ev.Error
		}
	})
	if err == nil && failed != nil {
		err = fmt.Errorf("warm the python kernel: %s: %s", failed.Name, failed.Value)
	}
	return err
}

// CodeRequest is code for one of a session's kernels.
type CodeRequest struct {
	Code string
	// Language picks the language's default context; ContextID a given
	// one. Not both.
	Language  string
	ContextID string
	Env       map[string]string
	// Event switches on handler mode (any JSON).
	Event   []byte
	Timeout time.Duration // 0 means 30s
}

// ExecuteCode runs code in a kernel of owner's session, calling onEvent
// for every event as it comes (stdout, stderr, result, error,
// return_value, number_of_executions, end_of_execution — which says
// whether the cell was interrupted at its timeout). The session's env and
// req.Env reach the code. Past Options.MaxCodeReplyBytes of events, the
// rest are dropped but for end_of_execution, and a stderr event says so.
func (m *Manager) ExecuteCode(ctx context.Context, owner, id string, req CodeRequest, onEvent func(mcpbox.CodeEvent)) error {
	if req.Language != "" && req.ContextID != "" {
		return mcpbox.Errorf(mcpbox.EINVALID, "give a language or a context_id, not both")
	}
	if req.Timeout == 0 {
		req.Timeout = 30 * time.Second
	}
	if err := mcpbox.ValidateTimeout(req.Timeout); err != nil {
		return err
	}
	if req.ContextID == "" {
		lang, err := mcpbox.ParseLanguage(req.Language)
		if err != nil {
			return err
		}
		req.Language = string(lang)
	}
	s, c, err := m.conn(ctx, owner, id)
	if err == nil {
		err = m.checkLanguage(ctx, s, req.Language)
	}
	if err != nil {
		return err
	}
	release, err := m.acquire(id, c)
	if err != nil {
		return err
	}
	defer release()
	areq := agentclient.ExecuteRequest{Code: req.Code, Language: req.Language, ContextID: req.ContextID,
		EnvVars: mergeEnv(s.Env, req.Env), Timeout: req.Timeout.Seconds()}
	if req.Event != nil {
		areq.Event = req.Event
	}
	var used int64
	over := false
	return m.callError(ctx, id, c.client.Execute(ctx, areq, func(ev mcpbox.CodeEvent) {
		if ev.Type != mcpbox.EventEndOfExecution {
			used += eventSize(&ev)
			if used > m.opts.MaxCodeReplyBytes {
				if !over {
					over = true
					onEvent(mcpbox.CodeEvent{Type: mcpbox.EventStderr,
						Text: fmt.Sprintf("\n[mcpbox: this execution sent more than %d bytes of output and results; the rest was dropped]\n", m.opts.MaxCodeReplyBytes)})
				}
				return
			}
		}
		onEvent(ev)
	}))
}

// eventSize is about what an event costs to keep.
func eventSize(ev *mcpbox.CodeEvent) int64 {
	n := len(ev.Text) + len(ev.Value)
	if r := ev.Result; r != nil {
		n += len(r.HTML) + len(r.Markdown) + len(r.LaTeX) + len(r.JSON) + len(r.PNG) + len(r.JPEG) + len(r.SVG)
	}
	if e := ev.Error; e != nil {
		n += len(e.Name) + len(e.Value) + len(e.Traceback)
	}
	return int64(n)
}

// Languages returns the languages of the kernels owner's session has
// started: those whose state a next call finds. It does not count as a
// use of the session.
func (m *Manager) Languages(ctx context.Context, owner, id string) ([]string, error) {
	s, err := m.Get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if s.State != mcpbox.SessionRunning {
		return nil, nil
	}
	m.connMu.Lock()
	c := m.conns[id]
	if c == nil {
		c = m.newConn(id)
		m.conns[id] = c
	}
	m.connMu.Unlock()
	list, err := c.client.Contexts(ctx)
	if err != nil {
		return nil, m.callError(ctx, id, err)
	}
	var langs []string
	for _, k := range list {
		if !slices.Contains(langs, k.Language) {
			langs = append(langs, k.Language)
		}
	}
	slices.Sort(langs)
	return langs, nil
}
