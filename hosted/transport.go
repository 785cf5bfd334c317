package hosted

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/manager"
)

// maxMessageBytes bounds one JSON-RPC message from a hosted server: what
// a sandbox sends is untrusted, and a line that never ends must not grow
// the host's memory without bound.
const maxMessageBytes = 32 << 20

// stderrTailBytes is how much of a server's stderr is kept, to explain
// a crash.
const stderrTailBytes = 8 << 10

// stdioTransport is an mcp.Transport over a process's stdin and stdout
// in a sandbox (manager.Stdio): newline-delimited JSON-RPC, as MCP's
// stdio transport frames it. Its stderr goes to a bounded tail, and its
// end is reported to onEnd.
type stdioTransport struct {
	p      *manager.Stdio
	stderr *tail
	log    *slog.Logger
	onEnd  func(end *manager.ProcessEnd, err error)
	// progress counts progress notifications read and not yet handled.
	progress *barrier
}

var _ mcp.Transport = (*stdioTransport)(nil)

func (t *stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &stdioConn{p: t.p, msgs: make(chan jsonrpc.Message), done: make(chan struct{}), log: t.log, progress: t.progress}
	go c.read(t.stderr, t.onEnd)
	return c, nil
}

type stdioConn struct {
	p        *manager.Stdio
	log      *slog.Logger
	progress *barrier
	msgs     chan jsonrpc.Message
	// done closes when the process's output ended or Close was called;
	// err then says why.
	done      chan struct{}
	doneOnce  sync.Once
	err       error
	writeMu   sync.Mutex
	closeOnce sync.Once
}

func (c *stdioConn) finish(err error) {
	c.doneOnce.Do(func() {
		c.err = err
		close(c.done)
	})
}

// read splits stdout into messages and keeps stderr's tail until the
// process ends.
func (c *stdioConn) read(stderr *tail, onEnd func(*manager.ProcessEnd, error)) {
	var buf []byte
	for {
		o, err := c.p.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the server's output stream ended")
			}
			c.finish(err)
			if onEnd != nil {
				onEnd(nil, err)
			}
			return
		}
		if len(o.Stderr) > 0 {
			stderr.Write(o.Stderr)
		}
		if o.End != nil {
			err := fmt.Errorf("the server exited (%s)", o.End.Status)
			c.finish(err)
			if onEnd != nil {
				onEnd(o.End, err)
			}
			return
		}
		buf = append(buf, o.Stdout...)
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimSpace(buf[:i])
			buf = buf[i+1:]
			if len(line) == 0 {
				continue
			}
			msg, err := jsonrpc.DecodeMessage(line)
			if err != nil {
				// Servers that print banners on stdout exist; the line
				// is not MCP, so it is dropped, not fatal.
				c.log.Debug("hosted server wrote a line that is not JSON-RPC", "err", err, "len", len(line))
				continue
			}
			c.order(msg)
			select {
			case c.msgs <- msg:
			case <-c.done:
				return
			}
		}
		if len(buf) > maxMessageBytes {
			err := fmt.Errorf("the server sent a message larger than %d MiB", maxMessageBytes>>20)
			c.finish(err)
			c.p.Close()
			if onEnd != nil {
				onEnd(nil, err)
			}
			return
		}
		// Keep the unread part in a buffer of its own size.
		if len(buf) == 0 {
			buf = nil
		}
	}
}

// order keeps a call's progress ahead of its result. go-sdk hands
// notifications to their handlers on a queue of their own, but settles a
// response as soon as it is read: the last progress notification of a
// call, written just before its result, would otherwise reach the
// caller's client after the result, which clients drop. So a response
// waits (briefly, at most progressWait) until the progress notifications
// read before it have been handled.
func (c *stdioConn) order(msg jsonrpc.Message) {
	if c.progress == nil {
		return
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m.Method == "notifications/progress" && !m.ID.IsValid() {
			c.progress.add()
		}
	case *jsonrpc.Response:
		c.progress.wait(progressWait)
	}
}

// progressWait bounds how long a response waits for earlier progress.
const progressWait = 5 * time.Second

// barrier counts pending work and lets a caller wait for none.
type barrier struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n is 0; replaced when it rises
}

func newBarrier() *barrier {
	z := make(chan struct{})
	close(z)
	return &barrier{zero: z}
}

func (b *barrier) add() {
	b.mu.Lock()
	if b.n == 0 {
		b.zero = make(chan struct{})
	}
	b.n++
	b.mu.Unlock()
}

func (b *barrier) done() {
	b.mu.Lock()
	if b.n > 0 {
		b.n--
		if b.n == 0 {
			close(b.zero)
		}
	}
	b.mu.Unlock()
}

// wait waits for the count to reach zero, or gives up after d and
// forgets what is pending (a notification go-sdk dropped must not slow
// every later response).
func (b *barrier) wait(d time.Duration) {
	b.mu.Lock()
	z := b.zero
	b.mu.Unlock()
	select {
	case <-z:
	case <-time.After(d):
		b.mu.Lock()
		if b.n > 0 {
			b.n = 0
			close(b.zero)
		}
		b.mu.Unlock()
	}
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.msgs:
		return m, nil
	case <-c.done:
		// A message decoded before the end still counts.
		select {
		case m := <-c.msgs:
			return m, nil
		default:
		}
		return nil, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.done:
		return c.err
	default:
	}
	return c.p.Write(ctx, b)
}

func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.finish(errors.New("connection closed"))
		c.p.Close()
	})
	return nil
}

func (c *stdioConn) SessionID() string { return "" }

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
