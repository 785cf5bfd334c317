package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"
)

// Config is how the agent is started, as JSON: `mcpbox agent --config F`
// reads it (a Kubernetes pod's entry point), and the local runtime's PID 1
// builds one after setting the sandbox up. Both then call Run: one entry
// point, whichever backend the sandbox lives on.
type Config struct {
	// UID and GID are who user processes run as; default the agent's own.
	UID int `json:"uid,omitempty"`
	GID int `json:"gid,omitempty"`
	// Home is the user's home directory; default /home/user.
	Home string `json:"home,omitempty"`
	// Cwd is where processes and kernels start; default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Env is the whole base environment of user processes.
	Env map[string]string `json:"env,omitempty"`
	// Root confines the file API; default "/".
	Root string `json:"root,omitempty"`
	// MaxFileBytes caps one uploaded file; default 100 MiB.
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
	// MaxOutputBytes caps each output stream of one execution; default 1 MiB.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// KernelModules is a directory of precompiled kernel drivers.
	KernelModules string `json:"kernel_modules,omitempty"`
	// Prestart names languages whose kernel starts with the agent.
	Prestart []string `json:"prestart,omitempty"`
	// Deadline is when the sandbox ends itself; zero means never.
	Deadline time.Time `json:"deadline,omitzero"`
	// Egress, when set, relays a loopback port to the host's egress
	// proxy and points every process's HTTP(S)_PROXY at it (egress.go).
	Egress *EgressConfig `json:"egress,omitempty"`
}

// ReadConfig reads a Config from a JSON file, refusing unknown keys.
func ReadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	defer f.Close()
	var c Config
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("agent config %s: %w", path, err)
	}
	return &c, nil
}

// Options turns c into the agent's Options, defaults filled in.
func (c *Config) Options() *Options {
	o := &Options{UID: c.UID, GID: c.GID, Home: c.Home, Cwd: c.Cwd, Env: c.Env, Root: c.Root,
		MaxFileBytes: c.MaxFileBytes, MaxOutputBytes: c.MaxOutputBytes, KernelModules: c.KernelModules,
		Prestart: c.Prestart, Deadline: c.Deadline}
	if o.Home == "" {
		o.Home = "/home/user"
	}
	if o.Cwd == "" {
		o.Cwd = "/workspace"
	}
	if o.Env == nil {
		o.Env = map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME": o.Home, "LANG": "C.UTF-8"}
	}
	return o
}

// Run serves the agent configured by c on every listener until ctx ends,
// SIGTERM arrives or the deadline passes (ErrDeadlinePassed). ready, if
// set, is called once it accepts connections.
func Run(ctx context.Context, c *Config, ready func(), lns ...net.Listener) error {
	if len(lns) == 0 {
		return fmt.Errorf("agent: nothing to listen on")
	}
	o := c.Options()
	o.Ready = ready
	if c.Egress != nil {
		ectx, cancel := context.WithCancel(ctx)
		wait, err := startEgress(ectx, c.Egress)
		if err != nil {
			cancel()
			return err
		}
		defer wait()
		defer cancel()
		o.Env = withProxyEnv(o.Env, c.Egress)
	}
	ln := lns[0]
	if len(lns) > 1 {
		ln = joinListeners(lns)
	}
	return Serve(ctx, ln, o)
}

// joined accepts from several listeners as one: envd's port and the code
// interpreter's are served by the same handler.
type joined struct {
	lns   []net.Listener
	conns chan net.Conn
	errs  chan error
	done  chan struct{}
}

func joinListeners(lns []net.Listener) net.Listener {
	j := &joined{lns: lns, conns: make(chan net.Conn), errs: make(chan error, len(lns)), done: make(chan struct{})}
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					j.errs <- err
					return
				}
				select {
				case j.conns <- c:
				case <-j.done:
					c.Close()
					return
				}
			}
		}()
	}
	return j
}

func (j *joined) Accept() (net.Conn, error) {
	select {
	case c := <-j.conns:
		return c, nil
	case err := <-j.errs:
		return nil, err
	case <-j.done:
		return nil, net.ErrClosed
	}
}

func (j *joined) Close() error {
	select {
	case <-j.done:
	default:
		close(j.done)
	}
	for _, ln := range j.lns {
		ln.Close()
	}
	return nil
}

func (j *joined) Addr() net.Addr { return j.lns[0].Addr() }
