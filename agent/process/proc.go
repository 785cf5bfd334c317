package process

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

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
	// rec keeps the process's recent output and its end; nil unless the
	// process has a tag.
	rec *record

	stdout, stderr *os.File

	stdinMu sync.Mutex
	stdin   *os.File // nil when started without stdin or once closed

	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	ended bool // set when the end event is about to go out; no new subscribers
	done  chan struct{}
}

// subscriber is one attached stream. Its last event is the end event;
// events is never closed, so a sender can never panic on it. gone is
// closed when the stream left, which releases any sender blocked on it.
type subscriber struct {
	events chan *processpb.ProcessEvent
	gone   chan struct{}
}

// subscribe attaches a stream, or returns nil once the process has ended.
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
// takes the event or leaves: an attached stream loses nothing.
func (p *proc) broadcast(ev *processpb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	deliver(subs, ev)
}

func deliver(subs []*subscriber, ev *processpb.ProcessEvent) {
	for _, s := range subs {
		select {
		case s.events <- ev:
		case <-s.gone:
		}
	}
}

// pump reads one output pipe until EOF, recording and sending chunks as
// they come. Once the process has exited, watch sets a read deadline on
// the pipe: if a descendant still holds it open at the deadline, pump takes
// what the pipe already holds — everything the process itself wrote is
// there by then — and stops following it.
func (p *proc) pump(f *os.File, stderr bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.output(buf[:n], stderr)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainBuffered(f, buf, func(b []byte) { p.output(b, stderr) })
			return
		}
		if err != nil {
			return
		}
	}
}

// output records chunk and sends a copy to every subscriber.
func (p *proc) output(chunk []byte, stderr bool) {
	if p.rec != nil {
		p.rec.write(chunk, stderr)
	}
	chunk = append([]byte(nil), chunk...)
	data := &processpb.ProcessEvent_DataEvent{}
	if stderr {
		data.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: chunk}
	} else {
		data.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: chunk}
	}
	p.broadcast(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}})
}

// drainBuffered reads what f's pipe holds right now without waiting for
// more, and at most the pipe's capacity: a descendant that keeps writing
// cannot hold the caller here.
func drainBuffered(f *os.File, buf []byte, out func([]byte)) {
	f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	limit := 1 << 20 // the default /proc/sys/fs/pipe-max-size
	rc.Control(func(fd uintptr) {
		if n := pipeCapacity(fd); n > 0 {
			limit = n
		}
	})
	for total := 0; total < limit; {
		var n int
		var rerr error
		// Returning true says "done": RawRead never parks waiting for
		// the pipe to become readable.
		if err := rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = syscall.Read(int(fd), buf[:min(len(buf), limit-total)])
				if rerr != syscall.EINTR {
					return true
				}
			}
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		out(buf[:n])
		total += n
	}
}

// finish sends the end event to every subscriber. It runs after both
// pumps have returned, so every byte read precedes it on every stream.
func (p *proc) finish(end *processpb.ProcessEvent) {
	p.mu.Lock()
	p.ended = true
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	deliver(subs, end)
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
