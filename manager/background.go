package manager

import (
	"bytes"
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/gen/processpb"
)

// maxBackgroundOutput caps what the manager keeps of one background
// command's stdout and of its stderr; the oldest bytes go first.
const maxBackgroundOutput = 1 << 20

// background is a command running on its own after StartCommand.
type background struct {
	session string
	tag     string

	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	dropped        int64
	done           bool
	exitCode       int
	err            error
}

func (b *background) write(buf *bytes.Buffer, p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	buf.Write(p)
	if over := buf.Len() - maxBackgroundOutput; over > 0 {
		buf.Next(over)
		b.dropped += int64(over)
	}
}

// CommandOutput is what a background command has printed so far.
type CommandOutput struct {
	Stdout, Stderr []byte
	// Dropped counts the oldest bytes discarded to keep within 1 MiB.
	Dropped  int64
	Done     bool
	ExitCode int
}

// StartCommand starts req in the background of owner's session and returns
// a handle for CommandOutput and StopCommand. req.Timeout, if set, still
// kills it.
func (m *Manager) StartCommand(ctx context.Context, owner, id string, req CommandRequest) (string, error) {
	if req.Command == "" {
		return "", mcpbox.Errorf(mcpbox.EINVALID, "command is empty")
	}
	s, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return "", err
	}
	handle := "bg" + mcpbox.NewID()[:12]
	b := &background{session: id, tag: handle}
	// The command outlives this call: its context is the manager's own.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if req.Timeout > 0 {
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), req.Timeout)
	}
	started := make(chan error, 1)
	go func() {
		defer cancel()
		res, err := c.client.Run(rctx, agentclient.Command{Cmd: "/bin/bash", Args: []string{"-c", req.Command},
			Env: mergeEnv(s.Env, req.Env), Cwd: req.Cwd, Tag: handle},
			writerFunc(func(p []byte) { b.write(&b.stdout, p) }),
			writerFunc(func(p []byte) { b.write(&b.stderr, p) }))
		b.mu.Lock()
		b.done = true
		if err != nil {
			b.err = agentError(err)
			b.exitCode = -1
		} else {
			b.exitCode = res.ExitCode
		}
		b.mu.Unlock()
		select {
		case started <- err:
		default:
		}
	}()
	// Wait until the agent has it (or refused it), so a bad command fails here.
	deadline := time.After(5 * time.Second)
	for {
		list, err := c.client.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		if err == nil {
			for _, p := range list.Msg.GetProcesses() {
				if p.GetTag() == handle {
					m.bgMu.Lock()
					m.bg[handle] = b
					m.bgMu.Unlock()
					return handle, nil
				}
			}
		}
		select {
		case err := <-started:
			m.bgMu.Lock()
			m.bg[handle] = b
			m.bgMu.Unlock()
			if err != nil {
				return "", agentError(err)
			}
			return handle, nil // it already ended
		case <-deadline:
			return "", mcpbox.Errorf(mcpbox.EINTERNAL, "background command did not start")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (m *Manager) background(ctx context.Context, owner, id, handle string) (*background, error) {
	if _, err := m.Get(ctx, owner, id); err != nil {
		return nil, err
	}
	m.bgMu.Lock()
	b := m.bg[handle]
	m.bgMu.Unlock()
	if b == nil || b.session != id {
		return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "no background command %q in session %s", handle, id)
	}
	return b, nil
}

// CommandOutput returns what a background command printed so far.
func (m *Manager) CommandOutput(ctx context.Context, owner, id, handle string) (*CommandOutput, error) {
	b, err := m.background(ctx, owner, id, handle)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return &CommandOutput{Stdout: bytes.Clone(b.stdout.Bytes()), Stderr: bytes.Clone(b.stderr.Bytes()),
		Dropped: b.dropped, Done: b.done, ExitCode: b.exitCode}, nil
}

// StopCommand kills a background command's process group.
func (m *Manager) StopCommand(ctx context.Context, owner, id, handle string) error {
	b, err := m.background(ctx, owner, id, handle)
	if err != nil {
		return err
	}
	_, c, err := m.conn(ctx, owner, id)
	if err != nil {
		return err
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: b.tag}}
	_, err = c.client.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil // it had ended already
	}
	return agentError(err)
}
