package manager

import (
	"context"
	"io"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// StdioRequest is a long-running process to talk to over its standard
// streams: an MCP server speaking stdio, a REPL.
type StdioRequest struct {
	// Command is a whole shell line; Args, when Command is empty, a
	// program and its arguments run with no shell.
	Command string
	Args    []string
	Cwd     string
	// Env reaches the process only: it travels in the agent's start
	// request, never on a command line, and is not logged.
	Env map[string]string
}

// Stdio is a two-way stream to a process in a session, from StartStdio.
// Write and Next may be called concurrently with each other; Close with
// anything.
type Stdio struct {
	m         *Manager
	owner, id string
	p         *agentclient.Stdio
}

// StdioOutput is a chunk of a process's stdout or stderr, or its end
// (End set, nothing else).
type StdioOutput struct {
	Stdout, Stderr []byte
	End            *ProcessEnd
}

// ProcessEnd is how a process ended.
type ProcessEnd struct {
	ExitCode int
	// Exited is false when a signal ended it; Status says which.
	Exited bool
	Status string
}

// StartStdio starts req in owner's session with its stdin open. It does
// not take an execution slot: the process is expected to live long, and
// it ends with Close, by itself, or with its session. The session's env
// and req.Env reach it.
func (m *Manager) StartStdio(ctx context.Context, owner, id string, req StdioRequest) (*Stdio, error) {
	argv := []string{"/bin/bash", "-c", req.Command}
	if req.Command == "" {
		if len(req.Args) == 0 || req.Args[0] == "" {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "command is empty").WithSuggestion("pass the command that starts the process")
		}
		argv = req.Args
	}
	s, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if req.Command != "" {
		argv[0] = m.shell(ctx, s)
	}
	p, err := c.client.StartStdio(ctx, agentclient.Command{Cmd: argv[0], Args: argv[1:], Env: mergeEnv(s.Env, req.Env), Cwd: req.Cwd})
	if err != nil {
		return nil, m.callError(ctx, id, err)
	}
	return &Stdio{m: m, owner: owner, id: id, p: p}, nil
}

// Write sends b to the process's stdin. Each write is a use of the
// session, through the door like any call: it keeps an idle timeout from
// ending a session whose process is being talked to, and fails once the
// session has ended.
func (s *Stdio) Write(ctx context.Context, b []byte) error {
	if _, _, err := s.m.conn(ctx, s.owner, s.id); err != nil {
		return err
	}
	if _, err := s.p.Write(b); err != nil {
		return s.m.callError(ctx, s.id, err)
	}
	return nil
}

// Next returns the process's next output or its end; io.EOF after that.
// What a sandbox writes is untrusted: callers bound what they keep.
func (s *Stdio) Next() (StdioOutput, error) {
	o, err := s.p.Next()
	if err != nil {
		if err == io.EOF {
			return StdioOutput{}, io.EOF
		}
		return StdioOutput{}, s.m.callError(context.Background(), s.id, err)
	}
	out := StdioOutput{Stdout: o.Stdout, Stderr: o.Stderr}
	if o.End != nil {
		out.End = &ProcessEnd{ExitCode: o.End.ExitCode, Exited: o.End.Exited, Status: o.End.Status}
	}
	return out, nil
}

// CloseStdin closes the process's stdin, so it reads EOF.
func (s *Stdio) CloseStdin(ctx context.Context) error {
	return s.m.callError(ctx, s.id, s.p.CloseStdin(ctx))
}

// Close kills the process and releases its streams.
func (s *Stdio) Close() error { return s.p.Close() }
