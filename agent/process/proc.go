package process

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agent/reaper"
	"github.com/mcpbox/mcpbox/gen/processpb"
)

// proc is one running process and the streams attached to it.
type proc struct {
	pid   uint32
	tag   string
	cfg   *processpb.ProcessConfig
	child *reaper.Child

	stdout, stderr *os.File

	stdinMu sync.Mutex
	stdin   *os.File // nil when started without stdin or once closed

	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	ended bool
	done  chan struct{}
}

// subscriber is one attached stream. events is closed when the process has
// ended and everything was delivered; gone is closed when the stream left.
type subscriber struct {
	events chan *processpb.ProcessEvent
	gone   chan struct{}
}

func (p *proc) subscribe() *subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	s := &subscriber{events: make(chan *processpb.ProcessEvent, 64), gone: make(chan struct{})}
	p.subs[s] = struct{}{}
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[s]; ok {
		delete(p.subs, s)
		close(s.gone)
	}
}

// broadcast delivers ev to every subscriber. A full subscriber blocks the
// sender — backpressure reaches the process through its pipe — until it
// takes the event or leaves.
func (p *proc) broadcast(ev *processpb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.events <- ev:
		case <-s.gone:
		}
	}
}

// pump reads one output pipe until EOF, sending chunks as they come.
func (p *proc) pump(f *os.File, stderr bool) {
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			data := &processpb.ProcessEvent_DataEvent{}
			if stderr {
				data.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: chunk}
			} else {
				data.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: chunk}
			}
			p.mu.Lock()
			ended := p.ended
			p.mu.Unlock()
			if !ended {
				p.broadcast(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}})
			}
		}
		if err != nil {
			return
		}
	}
}

// finish sends the end event and closes every subscriber's channel.
func (p *proc) finish(end *processpb.ProcessEvent) {
	p.broadcast(end)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	for s := range p.subs {
		close(s.events)
		delete(p.subs, s)
	}
	close(p.done)
}

// signal sends sig to the process's group; the process leads it.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.child.Done():
		return // reaped: the pid may already be someone else's
	default:
	}
	syscall.Kill(-int(p.pid), sig)
}

func (p *proc) write(in *processpb.ProcessInput) error {
	if in.GetPty() != nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("PTY input is not supported yet"))
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("process %d has no open stdin: start it with stdin=true, and do not close it first", p.pid))
	}
	if _, err := p.stdin.Write(in.GetStdin()); err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write to stdin of process %d: %w", p.pid, err))
	}
	return nil
}

// closeStdin closes stdin and reports whether it was open.
func (p *proc) closeStdin() bool {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return false
	}
	p.stdin.Close()
	p.stdin = nil
	return true
}
