package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// handoffConn is a connection from a sandbox's agent on its Unix socket.
// Its first byte says what it is: HandoffByte with a TCP socket attached
// (SCM_RIGHTS) is the sandbox process's own connection, served from then
// on in place of the Unix one; any other byte starts a relayed stream.
// The switch happens at the first Read or Write, in the goroutine
// serving the connection, never in the accept loop.
type handoffConn struct {
	unix *net.UnixConn

	once   sync.Once // the handshake
	err    error     // its outcome, set inside once
	prefix []byte    // a relayed stream's first byte, not yet read

	mu     sync.Mutex // guards conn, rdl and closed; never held while blocked
	conn   net.Conn   // after the switch: the handed socket, or unix
	rdl    time.Time
	closed bool
}

// maxHandoffFDs is what a message may carry; more is a protocol error.
const maxHandoffFDs = 1

func (h *handoffConn) handshake() error {
	h.once.Do(func() { h.err = h.switchConn() })
	return h.err
}

func (h *handoffConn) switchConn() error {
	h.mu.Lock()
	rdl := h.rdl
	h.mu.Unlock()
	if rdl.IsZero() {
		h.unix.SetReadDeadline(time.Now().Add(10 * time.Second))
	}
	b := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(4*maxHandoffFDs))
	n, oobn, flags, _, err := h.unix.ReadMsgUnix(b, oob)
	fds := parseRights(oob[:oobn])
	var next net.Conn = h.unix
	switch {
	case err != nil || n == 0:
		closeAll(fds)
		if err == nil {
			err = io.EOF
		}
		return err
	case len(fds) == 0:
		h.prefix = b[:1] // a relayed stream
	case b[0] != 'F' || len(fds) != 1 || flags&syscall.MSG_CTRUNC != 0:
		closeAll(fds)
		return errors.New("egress: malformed handoff")
	default:
		if next, err = streamSocket(fds[0]); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		next.Close()
		return net.ErrClosed
	}
	h.conn = next
	next.SetReadDeadline(h.rdl)
	if next != h.unix {
		h.unix.Close()
	}
	return nil
}

func (h *handoffConn) current() net.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return h.unix
	}
	return h.conn
}

func (h *handoffConn) Read(b []byte) (int, error) {
	if err := h.handshake(); err != nil {
		return 0, err
	}
	if len(h.prefix) > 0 { // only ever touched by the reading goroutine
		n := copy(b, h.prefix)
		h.prefix = h.prefix[n:]
		return n, nil
	}
	return h.current().Read(b)
}

func (h *handoffConn) Write(b []byte) (int, error) {
	if err := h.handshake(); err != nil {
		return 0, err
	}
	return h.current().Write(b)
}

// Close may come from another goroutine at any time, a handshake under
// way included: closing the Unix socket ends its read.
func (h *handoffConn) Close() error {
	h.mu.Lock()
	h.closed = true
	c := h.conn
	h.mu.Unlock()
	h.unix.Close()
	if c != nil {
		c.Close()
	}
	return nil
}

func (h *handoffConn) CloseWrite() error {
	if cw, ok := h.current().(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (h *handoffConn) LocalAddr() net.Addr  { return h.current().LocalAddr() }
func (h *handoffConn) RemoteAddr() net.Addr { return h.current().RemoteAddr() }

func (h *handoffConn) SetDeadline(t time.Time) error {
	h.SetReadDeadline(t)
	return h.current().SetWriteDeadline(t)
}

func (h *handoffConn) SetReadDeadline(t time.Time) error {
	h.mu.Lock()
	h.rdl = t
	h.mu.Unlock()
	return h.current().SetReadDeadline(t)
}

func (h *handoffConn) SetWriteDeadline(t time.Time) error {
	return h.current().SetWriteDeadline(t)
}

// parseRights returns the descriptors an SCM_RIGHTS message carried.
func parseRights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// streamSocket takes a handed descriptor only if it is a connected TCP
// socket: a sandbox may send anything, and anything else is closed.
func streamSocket(fd int) (net.Conn, error) {
	typ, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	// The local address tells the family: SO_DOMAIN is Linux's alone.
	sa, err2 := unix.Getsockname(fd)
	inet := false
	switch sa.(type) {
	case *unix.SockaddrInet4, *unix.SockaddrInet6:
		inet = true
	}
	if err1 != nil || err2 != nil || typ != unix.SOCK_STREAM || !inet {
		syscall.Close(fd)
		return nil, errors.New("egress: the handed descriptor is not a TCP socket")
	}
	f := os.NewFile(uintptr(fd), "handed")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("egress: handed socket: %w", err)
	}
	return c, nil
}
