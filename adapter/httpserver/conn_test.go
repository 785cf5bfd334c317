package httpserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpbox/mcpbox/adapter/httpserver"
)

// hang is how long a test waits for something that must happen soon; it
// only catches a hang, and a loaded machine never comes near it.
const hang = 15 * time.Second

// dial opens a raw connection to f's server.
func (f *fixture) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosed reads c until the server closes it and fails if that takes
// longer than hang. A reset counts as closed: the server may close while
// the client still writes.
func waitClosed(t *testing.T, c net.Conn, r io.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(hang))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still holds the connection after %v", hang)
	}
}

// TestIdleConnectionClosed: a keep-alive connection that sends nothing
// after its request is closed after IdleTimeout.
func TestIdleConnectionClosed(t *testing.T) {
	f := newFixture(t, httpserver.Options{IdleTimeout: 200 * time.Millisecond})
	c := f.dial(t)
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(hang))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz: %d, close %v; want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	waitClosed(t, c, br)
}

// TestSlowBodyCut: a client that sends headers and then its body slowly,
// or not at all, is answered or dropped after BodyTimeout, on both MCP
// endpoints.
func TestSlowBodyCut(t *testing.T) {
	f := newFixture(t, httpserver.Options{BodyTimeout: 200 * time.Millisecond})
	endpoint, _ := f.openSSE(t)
	tests := []struct {
		name    string
		path    string
		framing string // the body's framing header
		dribble bool   // send a byte every 20 ms instead of nothing
	}{
		{"mcp silent", "/mcp", "Content-Length: 1000", false},
		{"mcp dribble", "/mcp", "Content-Length: 100000", true},
		{"mcp chunked silent", "/mcp", "Transfer-Encoding: chunked", false},
		{"sse silent", endpoint, "Content-Length: 1000", false},
		{"sse dribble", endpoint, "Content-Length: 100000", true},
		// Refused before its body is read: net/http reads the rest to
		// reuse the connection, under the same deadline.
		{"sse unknown session", "/sse?sessionid=nope", "Content-Length: 100000", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := f.dial(t)
			io.WriteString(c, "POST "+tt.path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
				"Accept: application/json, text/event-stream\r\n"+tt.framing+"\r\n\r\n")
			start := `{"jsonrpc":"2.0",`
			if strings.Contains(tt.framing, "chunked") {
				start = fmt.Sprintf("%x\r\n%s\r\n", len(start), start)
			}
			io.WriteString(c, start)
			var wg sync.WaitGroup
			if tt.dribble {
				wg.Go(func() {
					for {
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				})
			}
			waitClosed(t, c, c)
			c.Close()
			wg.Wait()
		})
	}
}

// openSSE opens a legacy SSE stream and returns the endpoint its messages
// go to and the stream, read up to the endpoint event.
func (f *fixture) openSSE(t testing.TB) (string, io.ReadCloser) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.url+"/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	ep, err := readEndpoint(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return ep, resp.Body
}

// readEndpoint reads an SSE stream up to its endpoint event, byte by byte
// so nothing after it is buffered away, and returns the event's data.
func readEndpoint(r io.Reader) (string, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return "", fmt.Errorf("no endpoint event: %w", err)
		}
		if b[0] != '\n' {
			line = append(line, b[0])
			continue
		}
		if ep, ok := strings.CutPrefix(string(line), "data: "); ok {
			return ep, nil
		}
		line = line[:0]
	}
}

// TestStreamOutlivesTimeouts: an event stream is no request body and no
// idle connection; it stays open past both timeouts, gets keepalive
// comments while quiet, and still carries messages.
func TestStreamOutlivesTimeouts(t *testing.T) {
	f := newFixture(t, httpserver.Options{BodyTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond,
		StreamKeepAlive: 50 * time.Millisecond})
	tests := []struct {
		name string
		// open starts a stream; post sends a ping into its session, and
		// want is the stream line that shows the stream is still up.
		open func(t *testing.T) (post func(), stream io.ReadCloser, want string)
	}{
		{"sse", func(t *testing.T) (func(), io.ReadCloser, string) {
			endpoint, body := f.openSSE(t)
			return func() {
				resp, err := http.Post(f.url+endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"ping"}`))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("post to the SSE session: %d", resp.StatusCode)
				}
			}, body, `data: {"jsonrpc":"2.0","id":7,"result":{}}`
		}},
		{"streamable", func(t *testing.T) (func(), io.ReadCloser, string) {
			_, _, h := f.post(t, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",`+
				`"capabilities":{},"clientInfo":{"name":"by-hand","version":"1"}}}`)
			sid := map[string]string{"Mcp-Session-Id": h.Get("Mcp-Session-Id"), "MCP-Protocol-Version": "2025-06-18"}
			f.post(t, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			req, _ := http.NewRequest(http.MethodGet, f.url+"/mcp", nil)
			req.Header.Set("Accept", "text/event-stream")
			for k, v := range sid {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /mcp: %d", resp.StatusCode)
			}
			// The reply comes on the POST; the GET stream then keeps
			// getting comments.
			return func() {
				if status, r, _ := f.post(t, sid, `{"jsonrpc":"2.0","id":7,"method":"ping"}`); status != http.StatusOK || r == nil || r.Error != nil {
					t.Errorf("ping on the session: %d %+v", status, r)
				}
			}, resp.Body, ": keepalive"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			post, body, want := tt.open(t)
			hung := time.AfterFunc(hang, func() { body.Close() })
			defer hung.Stop()
			stream := bufio.NewReader(body)
			next := func() string {
				line, err := stream.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended (or hung for %v): %v", hang, err)
				}
				return strings.TrimSuffix(line, "\n")
			}
			// Three comments span more than both timeouts.
			for seen := 0; seen < 3; {
				if next() == ": keepalive" {
					seen++
				}
			}
			post()
			for next() != want {
			}
		})
	}
}

// pipeListener hands out in-memory connections, so the connection limit
// can be tested inside a synctest bubble, where "nothing more happens" is
// something a test can wait for.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	// The buffer is the listen backlog: dial returns before Accept.
	return &pipeListener{conns: make(chan net.Conn, 16), done: make(chan struct{})}
}

func (l *pipeListener) dial() net.Conn {
	server, client := net.Pipe()
	l.conns <- server
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }

// get sends one request on c and returns the response's status, or an
// error.
func get(c net.Conn) (int, error) {
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: pipe\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// TestConnectionLimit: with MaxConns connections open, the next one is
// not served until one of them closes.
func TestConnectionLimit(t *testing.T) {
	const max = 3
	h := httpserver.New(httpserver.Options{MaxConns: max})
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := h.Server()
		srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		go srv.Serve(h.Listener(ln))
		defer srv.Close()

		held := make([]net.Conn, max)
		for i := range held {
			held[i] = ln.dial()
			// Served, and then idle on keep-alive: open, like a client's
			// pooled connection.
			if status, err := get(held[i]); status != http.StatusOK {
				t.Fatalf("connection %d: %d %v", i, status, err)
			}
		}
		extra := ln.dial()
		served := make(chan error, 1)
		go func() {
			_, err := get(extra)
			served <- err
		}()
		synctest.Wait()
		select {
		case err := <-served:
			t.Fatalf("connection %d served while %d were open (err %v)", max+1, max, err)
		default:
		}

		held[0].Close()
		synctest.Wait()
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("connection %d after one closed: %v", max+1, err)
			}
		default:
			t.Fatalf("connection %d not served after one of %d closed", max+1, max)
		}
		for _, c := range append(held[1:], extra) {
			c.Close()
		}
	})
}
