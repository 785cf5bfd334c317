package testutil

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agent"
)

// FakeRuntime is an mcpbox.Runtime whose sandboxes are the real agent
// running in this process, each behind an in-memory listener that Dial
// reaches: the manager and the adapters are tested along the same path as
// in production, without root. Each sandbox's file API is confined to a
// temporary directory, and its processes run as the test's own user.
type FakeRuntime struct {
	mu        sync.Mutex
	live      map[string]*fakeSandbox
	Created   int
	Destroyed []string
	// CreateErr, when set, fails every Create.
	CreateErr error
	// CreateDelay, when set, is how long Create takes.
	CreateDelay time.Duration
}

type fakeSandbox struct {
	sb    mcpbox.Sandbox
	dir   string
	ln    *PipeListener
	agent *agent.Agent
	srv   *http.Server
	dead  bool
}

var _ mcpbox.Runtime = (*FakeRuntime)(nil)

// NewFakeRuntime returns an empty FakeRuntime.
func NewFakeRuntime() *FakeRuntime { return &FakeRuntime{live: map[string]*fakeSandbox{}} }

// Create starts an agent for the sandbox.
func (f *FakeRuntime) Create(ctx context.Context, spec mcpbox.SandboxSpec) (*mcpbox.Sandbox, error) {
	if err := mcpbox.ValidateID(spec.ID); err != nil {
		return nil, err
	}
	f.mu.Lock()
	err, delay := f.CreateErr, f.CreateDelay
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	dir, err := os.MkdirTemp("", "mcpbox-fake-"+spec.ID+"-")
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"workspace", "home/user", "tmp"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": filepath.Join(dir, "home/user"), "LANG": "C.UTF-8"}
	for k, v := range spec.Env {
		env[k] = v
	}
	a := agent.New(&agent.Options{Root: dir, Home: "/workspace", Cwd: filepath.Join(dir, "workspace"), Env: env})
	fs := &fakeSandbox{
		sb:  mcpbox.Sandbox{ID: spec.ID, Flavor: spec.Flavor, Created: time.Now().UTC(), Alive: true},
		dir: dir, ln: NewPipeListener(), agent: a,
	}
	fs.srv = &http.Server{Handler: a}
	fs.srv.Protocols = new(http.Protocols)
	fs.srv.Protocols.SetHTTP1(true)
	fs.srv.Protocols.SetUnencryptedHTTP2(true)
	go fs.srv.Serve(fs.ln)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[spec.ID]; ok {
		fs.stop()
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "sandbox %s already exists", spec.ID)
	}
	f.Created++
	f.live[spec.ID] = fs
	sb := fs.sb
	return &sb, nil
}

func (s *fakeSandbox) stop() {
	s.srv.Close()
	s.ln.Close()
	s.agent.Close()
}

// Destroy stops a sandbox's agent and forgets it.
func (f *FakeRuntime) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	fs, ok := f.live[id]
	if ok {
		f.Destroyed = append(f.Destroyed, id)
		delete(f.live, id)
	}
	f.mu.Unlock()
	if ok {
		fs.stop()
		os.RemoveAll(fs.dir)
	}
	return nil
}

// Kill makes a sandbox's agent die without its runtime destroying it, as a
// crash would: it stays listed, not alive, until Destroy.
func (f *FakeRuntime) Kill(id string) {
	f.mu.Lock()
	fs := f.live[id]
	if fs != nil {
		fs.dead = true
	}
	f.mu.Unlock()
	if fs != nil {
		fs.stop()
	}
}

// List returns every sandbox, alive or killed.
func (f *FakeRuntime) List(context.Context) ([]*mcpbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*mcpbox.Sandbox
	for _, fs := range f.live {
		sb := fs.sb
		sb.Alive = !fs.dead
		out = append(out, &sb)
	}
	return out, nil
}

// Dial connects to a sandbox's agent.
func (f *FakeRuntime) Dial(ctx context.Context, id string) (net.Conn, error) {
	f.mu.Lock()
	fs := f.live[id]
	f.mu.Unlock()
	if fs == nil {
		return nil, errors.New("fake runtime: no sandbox " + id)
	}
	return fs.ln.Dial(ctx)
}

// Live reports how many sandboxes exist.
func (f *FakeRuntime) Live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// Dir returns the host directory a sandbox's file API is confined to.
func (f *FakeRuntime) Dir(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fs := f.live[id]; fs != nil {
		return fs.dir
	}
	return ""
}

// PipeListener is a net.Listener whose connections are in-memory pipes
// made by its Dial.
type PipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewPipeListener returns a listening PipeListener.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Dial connects to the listener.
func (l *PipeListener) Dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, errors.New("connection refused: the listener is closed")
}

// Close stops Accept and Dial.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder address.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
