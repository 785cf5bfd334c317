package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/gen/processpb"
)

// Stdio is a process started with its stdin open, for a conversation
// over its standard streams (an MCP server speaking stdio): Write feeds
// its stdin through one StreamInput call, which keeps the bytes in order,
// and Next returns its output as the agent streams it from Start.
//
// The process outlives neither Close nor the end of its Start stream's
// context: Close kills its process group.
type Stdio struct {
	c      *Client
	pid    uint32
	cancel context.CancelFunc
	out    *connect.ServerStreamForClient[processpb.StartResponse]

	inMu     sync.Mutex
	in       *connect.ClientStreamForClient[processpb.StreamInputRequest, processpb.StreamInputResponse]
	inClosed bool

	closeOnce sync.Once
}

// StdioOutput is one event of a Stdio process: a chunk of stdout or
// stderr, or its end (End set, nothing else).
type StdioOutput struct {
	Stdout, Stderr []byte
	End            *Result
}

// StartStdio starts cmd (cmd.Stdin is ignored) with its stdin open and
// returns once the agent has started it. The process runs until it ends,
// Close is called, or ctx is done.
func (c *Client) StartStdio(ctx context.Context, cmd Command) (*Stdio, error) {
	pc := &processpb.ProcessConfig{Cmd: cmd.Cmd, Args: cmd.Args, Envs: cmd.Env}
	if cmd.Cwd != "" {
		pc.Cwd = &cmd.Cwd
	}
	stdin := true
	req := &processpb.StartRequest{Process: pc, Stdin: &stdin}
	if cmd.Tag != "" {
		req.Tag = &cmd.Tag
	}
	// No deadline: the agent would take it as the process's timeout.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	out, err := c.Process.Start(sctx, connect.NewRequest(req))
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Stdio{c: c, cancel: cancel, out: out}
	// The first event names the process; nothing else can come before it.
	if !out.Receive() {
		err := out.Err()
		out.Close()
		cancel()
		if err == nil {
			err = errors.New("agent closed the process stream before the process started")
		}
		return nil, err
	}
	st := out.Msg().GetEvent().GetStart()
	if st == nil {
		out.Close()
		cancel()
		return nil, errors.New("agent sent an event before the process's start")
	}
	s.pid = st.GetPid()
	s.in = c.Process.StreamInput(sctx)
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: s.pid}}
	if err := s.in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Start{
		Start: &processpb.StreamInputRequest_StartEvent{Process: sel}}}); err != nil {
		s.Close()
		return nil, s.inputError(err)
	}
	return s, nil
}

// Pid is the process's id inside the sandbox.
func (s *Stdio) Pid() uint32 { return s.pid }

// Write sends p to the process's stdin, in order with earlier writes.
func (s *Stdio) Write(p []byte) (int, error) {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.inClosed {
		return 0, errors.New("stdin is closed")
	}
	in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: p}}
	if err := s.in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Data{
		Data: &processpb.StreamInputRequest_DataEvent{Input: in}}}); err != nil {
		s.inClosed = true
		return 0, s.inputError(err)
	}
	return len(p), nil
}

// inputError turns a failed send into the agent's answer, when it has
// one (the process ended, say), after the stream broke.
func (s *Stdio) inputError(err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := s.in.CloseAndReceive(); rerr != nil {
			return rerr
		}
	}
	return err
}

// CloseStdin closes the process's stdin, so it reads EOF.
func (s *Stdio) CloseStdin(ctx context.Context) error {
	s.inMu.Lock()
	if !s.inClosed {
		s.inClosed = true
		s.in.CloseAndReceive()
	}
	s.inMu.Unlock()
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: s.pid}}
	_, err := s.c.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel}))
	return err
}

// Next returns the process's next output, or its end. After the end (or
// an error) the stream is over: io.EOF follows.
func (s *Stdio) Next() (StdioOutput, error) {
	for s.out.Receive() {
		ev := s.out.Msg().GetEvent()
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			if len(d.GetStdout()) > 0 || len(d.GetStderr()) > 0 {
				return StdioOutput{Stdout: d.GetStdout(), Stderr: d.GetStderr()}, nil
			}
		case ev.GetEnd() != nil:
			e := ev.GetEnd()
			return StdioOutput{End: &Result{ExitCode: int(e.GetExitCode()), Exited: e.GetExited(), Status: e.GetStatus()}}, nil
		}
	}
	if err := s.out.Err(); err != nil {
		return StdioOutput{}, err
	}
	return StdioOutput{}, io.EOF
}

// Kill kills the process's group.
func (s *Stdio) Kill(ctx context.Context) error {
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: s.pid}}
	_, err := s.c.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil // ended already
	}
	if err != nil {
		return fmt.Errorf("kill process %d: %w", s.pid, err)
	}
	return nil
}

// Close kills the process (a stream that merely went away would leave it
// running) and releases both streams. It is safe to call more than once.
func (s *Stdio) Close() error {
	var err error
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		err = s.Kill(ctx)
		cancel()
		// Cancelling first unblocks a Write stuck on a full stdin.
		s.cancel()
		s.inMu.Lock()
		s.inClosed = true
		s.inMu.Unlock()
		s.out.Close()
	})
	return err
}

// killTimeout bounds the kill Close sends: an agent that does not answer
// is a sandbox on its way out anyway.
const killTimeout = 5 * time.Second
