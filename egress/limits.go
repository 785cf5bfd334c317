package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// limitListener admits a session's connections up to its limit and the
// proxy's; past either, the connection gets its refusal at once and is
// closed, so a sandbox cannot make the host hold more descriptors.
type limitListener struct {
	net.Listener
	s *session
}

func (l *limitListener) Accept() (net.Conn, error) {
	s := l.s
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uc, ok := c.(*net.UnixConn); ok {
			c = &handoffConn{unix: uc}
		}
		s.stats.conns.Add(1)
		select {
		case s.sem <- struct{}{}:
		default:
			s.refused("(connection limit)", fmt.Sprintf("too many connections: this session may hold %d at once", cap(s.sem)))
			s.p.refuseLater(c, http.StatusTooManyRequests, fmt.Sprintf("this session already holds %d connections through the egress proxy, its limit; close some and retry", cap(s.sem)))
			continue
		}
		select {
		case s.p.global <- struct{}{}:
		default:
			<-s.sem
			s.refused("(connection limit)", "the egress proxy is at its limit for all sessions")
			s.p.refuseLater(c, http.StatusServiceUnavailable, "the egress proxy holds as many connections as it may for all sessions; retry shortly")
			continue
		}
		s.stats.active.Add(1)
		return &trackedConn{Conn: c, s: s}, nil
	}
}

// refuseLater answers c with a refusal in the background. When too many
// refusals are under way it answers at once, without waiting to drain
// what the client sent: the answer, a few hundred bytes, fits any new
// socket's buffer, so the write does not block the accept loop, and a
// client past the limit is still told why (over TCP the close may yet
// reset it before it reads, as any unread request does).
func (p *Proxy) refuseLater(c net.Conn, status int, msg string) {
	select {
	case p.refusing <- struct{}{}:
		go func() {
			defer func() { <-p.refusing }()
			refuseRaw(c, status, msg, 5*time.Millisecond)
		}()
	default:
		refuseRaw(c, status, msg, 0)
	}
}

// trackedConn gives its places back when closed, once.
type trackedConn struct {
	net.Conn
	s    *session
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.stats.active.Add(-1)
		<-c.s.sem
		<-c.s.p.global
	})
	return err
}

// CloseWrite half-closes when the underlying connection can.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// raw is the connection bytes really move on (the handed socket, once
// the hand-off happened), without the wrappers' indirection.
func (c *trackedConn) raw() net.Conn {
	if h, ok := c.Conn.(*handoffConn); ok {
		return h.current()
	}
	return c.Conn
}

// refuseRaw answers a connection the proxy will not serve, then closes
// it. It first reads what the client still sends, for up to drain, so
// that closing a TCP connection with unread bytes does not reset it
// before the client reads the answer; connections past a limit are
// drained only for what is already there, to give their descriptor back
// at once.
func refuseRaw(c net.Conn, status int, msg string, drain time.Duration) {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write(responseBytes(status, msg))
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		if drain > 0 {
			c.SetReadDeadline(time.Now().Add(drain))
			io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
	}
	c.Close()
}

// responseBytes is a whole HTTP response: the reason phrase carries the
// message too, because clients show it where they drop the body (a
// failed CONNECT in Python says "Tunnel connection failed: 403 …").
func responseBytes(status int, msg string) []byte {
	body := "mcpbox egress: " + msg + "\n"
	reason := http.StatusText(status)
	if status == http.StatusForbidden {
		reason += " by mcpbox network policy"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Mcpbox-Egress: %s\r\n\r\n%s",
		status, reason, len(body), headerSafe(msg), body)
	return []byte(b.String())
}

func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r >= 0x80 {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
