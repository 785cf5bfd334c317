package manager

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/gen/processpb"
)

// bgPrefix starts every background command's tag: the agent keeps their
// output and exit by tag, so any mcpbox process sharing the store can read
// and stop them, and nothing of them is kept on the host.
const bgPrefix = "bg"

// CommandOutput is what a background command has printed so far: the last
// bytes of each stream, as the sandbox's agent keeps them.
type CommandOutput struct {
	Stdout, Stderr []byte
	// Dropped counts the oldest bytes discarded to keep within the
	// agent's buffer, both streams together.
	Dropped  int64
	Done     bool
	ExitCode int
}

// StartCommand starts req in the background of owner's session and returns
// a handle for CommandOutput and StopCommand. req.Timeout, if set, still
// kills it. At most Options.MaxBackgroundCommands run at once per session.
func (m *Manager) StartCommand(ctx context.Context, owner, id string, req CommandRequest) (string, error) {
	if req.Command == "" {
		return "", mcpbox.Errorf(mcpbox.EINVALID, "command is empty")
	}
	if req.Timeout < 0 || req.Timeout > mcpbox.MaxTimeout {
		return "", mcpbox.ValidateTimeout(req.Timeout)
	}
	s, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return "", err
	}
	list, err := c.client.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return "", m.callError(ctx, id, err)
	}
	running := 0
	for _, p := range list.Msg.GetProcesses() {
		if strings.HasPrefix(p.GetTag(), bgPrefix) {
			running++
		}
	}
	if running >= m.opts.MaxBackgroundCommands {
		return "", mcpbox.Errorf(mcpbox.ELIMIT, "session %s already runs its maximum of %d background commands", id, m.opts.MaxBackgroundCommands).
			With("limit", m.opts.MaxBackgroundCommands).With("session_id", id).
			WithSuggestion("stop one with stop_command, or wait for one to finish")
	}
	handle := bgPrefix + mcpbox.NewID()[:12]
	// The command outlives this call. The stream is kept open only so that
	// req.Timeout, the process's lifetime, is enforced by the agent; when
	// it closes early the command carries on, and its output stays in the
	// agent either way.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if req.Timeout > 0 {
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), req.Timeout)
	}
	started := make(chan error, 1)
	go func() {
		defer cancel()
		_, err := c.client.Run(rctx, agentclient.Command{Cmd: m.shell(ctx, s), Args: []string{"-c", req.Command},
			Env: mergeEnv(s.Env, req.Env), Cwd: req.Cwd, Tag: handle, OnStart: func() { started <- nil }}, nil, nil)
		if err != nil {
			select {
			case started <- err:
			default:
			}
		}
	}()
	select {
	case err := <-started:
		if err != nil {
			return "", m.callError(ctx, id, err)
		}
		return handle, nil
	case <-time.After(10 * time.Second):
		cancel()
		return "", mcpbox.Errorf(mcpbox.EINTERNAL, "the background command did not start within 10s")
	case <-ctx.Done():
		cancel()
		return "", ctx.Err()
	}
}

func notBackground(handle, id string) *mcpbox.Error {
	return mcpbox.Errorf(mcpbox.ENOTFOUND, "no background command %q in session %s (finished ones are kept for 10 minutes)", handle, id).
		WithSuggestion("use the handle execute_command returned with background: true")
}

// CommandOutput returns what a background command printed so far.
func (m *Manager) CommandOutput(ctx context.Context, owner, id, handle string) (*CommandOutput, error) {
	if !strings.HasPrefix(handle, bgPrefix) {
		return nil, notBackground(handle, id)
	}
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	out, err := c.client.Output(ctx, handle)
	var he *agentclient.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		return nil, notBackground(handle, id)
	}
	if err != nil {
		return nil, m.callError(ctx, id, err)
	}
	return &CommandOutput{Stdout: []byte(out.Stdout), Stderr: []byte(out.Stderr),
		Dropped: out.StdoutDropped + out.StderrDropped, Done: out.Done, ExitCode: out.ExitCode}, nil
}

// StopCommand kills a background command's process group.
func (m *Manager) StopCommand(ctx context.Context, owner, id, handle string) error {
	if !strings.HasPrefix(handle, bgPrefix) {
		return notBackground(handle, id)
	}
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return err
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: handle}}
	_, err = c.client.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		// Ended already, or never was: the agent's record tells which.
		if _, oerr := c.client.Output(ctx, handle); oerr != nil {
			return notBackground(handle, id)
		}
		return nil
	}
	return m.callError(ctx, id, err)
}
