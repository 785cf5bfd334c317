// Package agentclient is the host side's typed client of the in-sandbox
// agent: the generated Connect clients for process and filesystem, plus the
// plain HTTP routes (/health, /files, /execute, /contexts and mcpbox's own
// /mcpbox/v1 routes), over any http.RoundTripper — in practice the
// session manager's door, built on mcpbox.Runtime.Dial.
package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/gen/filesystempb/filesystempbconnect"
	"github.com/mcpbox/mcpbox/gen/processpb"
	"github.com/mcpbox/mcpbox/gen/processpb/processpbconnect"
)

// Client talks to one agent. It is safe for concurrent use.
type Client struct {
	Process    processpbconnect.ProcessClient
	Filesystem filesystempbconnect.FilesystemClient

	http *http.Client
}

// base is the URL every request goes to: the transport's connections
// already lead to one agent, so the host name only fills the slot.
const base = "http://agent"

// NewTransport returns an HTTP transport whose every connection comes from
// dial: h2c when the agent offers it (one connection carries every call),
// HTTP/1.1 otherwise.
func NewTransport(dial func(ctx context.Context) (net.Conn, error)) *http.Transport {
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 16,
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// New returns a client of the agent rt leads to. Connect options (a
// codec, say) apply to both services; the default is the binary codec.
func New(rt http.RoundTripper, opts ...connect.ClientOption) *Client {
	hc := &http.Client{Transport: rt}
	return &Client{
		Process:    processpbconnect.NewProcessClient(hc, base, opts...),
		Filesystem: filesystempbconnect.NewFilesystemClient(hc, base, opts...),
		http:       hc,
	}
}

// ForSandbox returns a client of sandbox id's agent, dialled through r:
// for tools and tests that hold a runtime rather than a manager.
func ForSandbox(r mcpbox.Runtime, id string, opts ...connect.ClientOption) *Client {
	return New(NewTransport(func(ctx context.Context) (net.Conn, error) { return r.Dial(ctx, id) }), opts...)
}

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Health returns nil when the agent answers GET /health.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/health", nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Download returns the content of the file at path in the sandbox.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files?path="+url.QueryEscape(path), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Upload writes r to the file at path in the sandbox, creating parents.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader) error {
	resp, err := c.do(ctx, http.MethodPost, "/files?path="+url.QueryEscape(path), r, "application/octet-stream")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// HTTPError is a non-2xx answer from one of the agent's plain HTTP routes.
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("agent: %d %s", e.Status, e.Message) }

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		msg := strings.TrimSpace(string(b))
		// The agent's JSON errors carry the message in a field.
		var body struct{ Message string }
		if json.Unmarshal(b, &body) == nil && body.Message != "" {
			msg = body.Message
		}
		return nil, &HTTPError{Status: resp.StatusCode, Message: msg}
	}
	return resp, nil
}

// Result is how a process ended.
type Result struct {
	ExitCode int
	Exited   bool // false when a signal ended it
	Status   string
}

// Command is one process to run with Run.
type Command struct {
	Cmd   string
	Args  []string
	Env   map[string]string
	Cwd   string
	Stdin io.Reader // nil: no stdin
	Tag   string
	// OnStart, if set, is called once the agent has started the process.
	OnStart func()
}

// Run starts cmd and streams its output to stdout and stderr as it is
// produced, returning when it ends. ctx's deadline, if any, is the
// process's timeout: the agent kills its process group when it passes, and
// Run returns an error whose connect code is DeadlineExceeded.
func (c *Client) Run(ctx context.Context, cmd Command, stdout, stderr io.Writer) (*Result, error) {
	pc := &processpb.ProcessConfig{Cmd: cmd.Cmd, Args: cmd.Args, Envs: cmd.Env}
	if cmd.Cwd != "" {
		pc.Cwd = &cmd.Cwd
	}
	req := &processpb.StartRequest{Process: pc}
	if cmd.Tag != "" {
		req.Tag = &cmd.Tag
	}
	withStdin := cmd.Stdin != nil
	if withStdin {
		req.Stdin = &withStdin
	}
	stream, err := c.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			if cmd.OnStart != nil {
				cmd.OnStart()
			}
			if withStdin {
				go c.feed(ctx, ev.GetStart().GetPid(), cmd.Stdin)
			}
		case ev.GetData() != nil:
			d := ev.GetData()
			if b := d.GetStdout(); len(b) > 0 && stdout != nil {
				stdout.Write(b)
			}
			if b := d.GetStderr(); len(b) > 0 && stderr != nil {
				stderr.Write(b)
			}
		case ev.GetEnd() != nil:
			e := ev.GetEnd()
			return &Result{ExitCode: int(e.GetExitCode()), Exited: e.GetExited(), Status: e.GetStatus()}, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("agent closed the process stream without an end event")
}

// feed copies r to the process's stdin, then closes it.
func (c *Client) feed(ctx context.Context, pid uint32, r io.Reader) {
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}
			if _, serr := c.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: in})); serr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	c.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel}))
}

// limitedReader fails, rather than truncating silently, past n bytes.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("reply larger than expected")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
