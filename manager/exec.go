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

// sessionConn is what the manager keeps per live session: a client of its
// agent, the slots that cap concurrent executions, and the session's record
// as last read from the store.
type sessionConn struct {
	client *agentclient.Client
	slots  chan struct{}

	// session and checked are the record and when it was read, under
	// Manager.connMu. A call within recordTTL of the read uses it as is.
	session *mcpbox.Session
	checked time.Time
}

// recordTTL is how long a session record read from the store serves calls
// without reading it again. Touch skips its write for the same second, so
// a busy session costs one store round trip a second, not one per call.
// Ending a session here drops the record at once; one ended by another
// mcpbox process on the same store is noticed within this time, and a
// call in between fails on the sandbox being gone.
const recordTTL = time.Second

// conn returns owner's running session and its connection, after
// recording the use.
func (m *Manager) conn(ctx context.Context, owner, id string) (*mcpbox.Session, *sessionConn, error) {
	now := m.opts.Now()
	m.connMu.Lock()
	if c := m.conns[id]; c != nil && c.session != nil && c.session.Owner == owner && now.Sub(c.checked) < recordTTL {
		s := c.session
		m.connMu.Unlock()
		return s, c, nil
	}
	m.connMu.Unlock()
	s, err := m.Touch(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	m.connMu.Lock()
	defer m.connMu.Unlock()
	if _, gone := m.ended[id]; gone {
		// Stopped here between the read and now.
		return nil, nil, mcpbox.Errorf(mcpbox.ESESSION, "session %q has stopped", id).WithSuggestion("create a new session")
	}
	c := m.conns[id]
	if c == nil {
		c = &sessionConn{client: agentclient.New(s.Sandbox.Endpoint), slots: make(chan struct{}, m.opts.MaxConcurrentExecutions)}
		m.conns[id] = c
	}
	// The record is shared by the calls that follow: they read it only.
	c.session, c.checked = s, now
	return s, c, nil
}

// endedTTL is how long an ended session is remembered against a call
// that read its record before the end (a store round trip; far less).
const endedTTL = time.Minute

// dropConn forgets a session's connection when it ends.
func (m *Manager) dropConn(id string) {
	now := m.opts.Now()
	m.connMu.Lock()
	if c := m.conns[id]; c != nil {
		c.client.Close()
		delete(m.conns, id)
	}
	for old, at := range m.ended {
		if now.Sub(at) > endedTTL {
			delete(m.ended, old)
		}
	}
	m.ended[id] = now
	m.connMu.Unlock()
}

// acquire takes an execution slot, or fails at once when all are busy.
func (m *Manager) acquire(id string, c *sessionConn) (func(), error) {
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	default:
		return nil, mcpbox.Errorf(mcpbox.ELIMIT, "session %s already runs its maximum of %d executions at once", id, cap(c.slots)).
			With("limit", cap(c.slots)).With("session_id", id).
			WithSuggestion("wait for a running execution to finish, or use another session")
	}
}

// CommandRequest is a shell line to run in a session.
type CommandRequest struct {
	// Command is a whole shell line: pipes, redirects and && work.
	Command string
	Cwd     string
	Env     map[string]string
	// Timeout kills the command when it passes; 0 means 30s.
	Timeout time.Duration
}

// CommandResult is how a command ended.
type CommandResult struct {
	Stdout, Stderr []byte
	ExitCode       int
	Duration       time.Duration
}

// RunCommand runs req in owner's session and returns once it ended. The
// session's env and req.Env reach the command; output also streams to
// onOutput (if set) as it comes.
func (m *Manager) RunCommand(ctx context.Context, owner, id string, req CommandRequest, onOutput func(stderr bool, b []byte)) (*CommandResult, error) {
	if req.Command == "" {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "command is empty")
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
	release, err := m.acquire(id, c)
	if err != nil {
		return nil, err
	}
	defer release()
	var out, errb bytes.Buffer
	stdout, stderr := io.Writer(&out), io.Writer(&errb)
	if onOutput != nil {
		stdout = io.MultiWriter(&out, writerFunc(func(b []byte) { onOutput(false, b) }))
		stderr = io.MultiWriter(&errb, writerFunc(func(b []byte) { onOutput(true, b) }))
	}
	rctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	start := time.Now()
	res, err := c.client.Run(rctx, agentclient.Command{Cmd: "/bin/bash", Args: []string{"-c", req.Command},
		Env: mergeEnv(s.Env, req.Env), Cwd: req.Cwd}, stdout, stderr)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			return nil, mcpbox.Errorf(mcpbox.ETIMEOUT, "the command ran past its timeout of %s and was killed", req.Timeout).
				With("timeout_seconds", req.Timeout.Seconds()).With("stdout", out.String()).
				WithSuggestion("raise the timeout, or run it with background: true")
		}
		return nil, agentError(err)
	}
	return &CommandResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), ExitCode: res.ExitCode, Duration: time.Since(start)}, nil
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

// ReadFile returns a file of owner's session.
func (m *Manager) ReadFile(ctx context.Context, owner, id, path string) ([]byte, error) {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	rc, err := c.client.Download(ctx, path)
	if err != nil {
		return nil, agentError(err)
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// WriteFile writes a file in owner's session, creating parents.
func (m *Manager) WriteFile(ctx context.Context, owner, id, path string, data []byte) error {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return err
	}
	return agentError(c.client.Upload(ctx, path, bytes.NewReader(data)))
}

// ListFiles lists a directory of owner's session, depth levels deep.
func (m *Manager) ListFiles(ctx context.Context, owner, id, path string, depth int) ([]*filesystempb.EntryInfo, error) {
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Filesystem.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: path, Depth: uint32(max(depth, 1))}))
	if err != nil {
		return nil, agentError(err)
	}
	return resp.Msg.GetEntries(), nil
}

// agentError maps what the agent answered to a domain error.
func agentError(err error) error {
	if err == nil {
		return nil
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

// WarmPython starts a sandbox's default Python context by running an empty
// cell, so the first real execution finds a live kernel.
func WarmPython(ctx context.Context, sb *mcpbox.Sandbox) error {
	c := agentclient.New(sb.Endpoint)
	defer c.Close()
	var failed agentclient.Event
	err := c.Execute(ctx, agentclient.ExecuteRequest{Code: "pass", Language: "python"}, func(ev agentclient.Event) {
		if ev.Type() == "error" {
			failed = ev
		}
	})
	if err == nil && failed != nil {
		err = fmt.Errorf("warm the python kernel: %v: %v", failed["name"], failed["value"])
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
// return_value, number_of_executions, end_of_execution). The session's env
// and req.Env reach the code.
func (m *Manager) ExecuteCode(ctx context.Context, owner, id string, req CodeRequest, onEvent func(agentclient.Event)) error {
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
	return agentError(c.client.Execute(ctx, areq, onEvent))
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
	m.connMu.Unlock()
	client := agentclient.New(s.Sandbox.Endpoint)
	if c != nil {
		client = c.client
	} else {
		defer client.Close()
	}
	list, err := client.Contexts(ctx)
	if err != nil {
		return nil, agentError(err)
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
