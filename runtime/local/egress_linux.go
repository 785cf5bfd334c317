package local

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agent"
	"github.com/mcpbox/mcpbox/internal/linux/mount"
)

// How a sandbox reaches the egress proxy
//
// Each sandbox has a directory of its own, sessions/<id>/egress, owned by
// the sandbox's root (its mapped host uid) and private to it, holding one
// Unix socket, proxy.sock, on which the mcpbox process looking after the
// sandbox listens and serves the proxy. The sandbox's PID 1 is handed a
// detached, read-only copy of that directory's mount (open_tree, like the
// kernel drivers; rootless, it clones it itself), which it keeps open
// and never attaches: the agent's relay connects to
// /proc/self/fd/<n>/proxy.sock for every connection. A detached mount's
// root has no parent to walk up to, so the descriptor leads nowhere
// else, and no other sandbox can reach this one's socket (sessions/ is
// private to the host).
//
// A socket by path, rather than a descriptor passed once, is what lets a
// sandbox outlive the process that made it: when that process dies and
// another adopts the sandbox (Adopt, after the store's lease says the
// first is gone), the new one listens on the same path again, and the
// agent's next connection reaches it. Connections made while no process
// listens get a 502 from the agent saying the proxy is unreachable.
const (
	egressDir  = "egress"
	egressSock = "proxy.sock"
)

// egressState is the runtime's part of egress: the proxy it hands
// sandboxes to, and which of them this process serves.
type egressState struct {
	server EgressServer // nil: sandboxes get no egress

	mu      sync.Mutex
	serving map[string]uint64 // sandbox id -> inode of the socket we listen on
	sweeper bool
}

// egressConfigured says whether sandboxes of this runtime can be given
// a network policy.
func (r *Runtime) egressConfigured() bool { return r.eg.server != nil }

// checkNetwork refuses a policy this runtime cannot enforce.
func (r *Runtime) checkNetwork(p *mcpbox.NetworkPolicy) error {
	if p.None() || r.egressConfigured() {
		return nil
	}
	return mcpbox.Errorf(mcpbox.EUNSUPPORTED, "this mcpbox runs without its egress proxy, so sandboxes cannot reach any network (asked for: %s)", p).
		WithSuggestion("leave network out, or use mcpbox serve or mcpbox mcp, which start the egress proxy")
}

// prepareEgress makes sandbox id's egress directory and socket, serves
// the proxy on it and puts what the child needs in h. Without a proxy it
// does nothing: the sandbox has no way out at all.
func (r *Runtime) prepareEgress(id string, h *handoff) error {
	if r.eg.server == nil {
		return nil
	}
	dir := filepath.Join(r.dir(id), egressDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("egress directory: %w", err)
	}
	if err := r.listenEgress(id); err != nil {
		return err
	}
	if !r.rootless {
		// The sandbox's root may search the directory and connect, and
		// no one else on the host but root.
		if err := os.Chown(dir, r.uidBase, r.uidBase); err != nil {
			return fmt.Errorf("egress directory: %w", err)
		}
		t, err := mount.Clone(nil, dir, true)
		if err != nil {
			return fmt.Errorf("egress directory: %w", err)
		}
		h.egress = t
	} else {
		h.egressDir = dir
	}
	return nil
}

// egressConfig tells the child where its egress directory is: the fd
// command gave it, or (rootless) the path it clones itself.
func (h *handoff) egressConfig(cfg *initConfig) {
	cfg.EgressFD = h.egressFD
	cfg.EgressDir = h.egressDir
}

// listenEgress listens on sandbox id's proxy socket, replacing whatever
// socket file an earlier process left there, and serves the proxy on it.
func (r *Runtime) listenEgress(id string) error {
	path := filepath.Join(r.dir(id), egressDir, egressSock)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("egress socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("egress socket: %w", err)
	}
	// The file stays when we stop: removing it could remove a newer
	// process's socket at the same path.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err == nil && !r.rootless {
		err = os.Chown(path, r.uidBase, r.uidBase)
	}
	var st unix.Stat_t
	if err == nil {
		err = unix.Stat(path, &st)
	}
	if err != nil {
		ln.Close()
		return fmt.Errorf("egress socket: %w", err)
	}
	if err := r.eg.server.Serve(id, ln); err != nil {
		return err
	}
	r.eg.mu.Lock()
	if r.eg.serving == nil {
		r.eg.serving = map[string]uint64{}
	}
	r.eg.serving[id] = st.Ino
	start := !r.eg.sweeper
	r.eg.sweeper = true
	r.eg.mu.Unlock()
	if start {
		go r.sweepEgress()
	}
	return nil
}

// Adopt implements mcpbox.Adopter: this process now looks after sandbox
// id, so it serves the sandbox's egress socket, in place of the process
// that did (dead, or done with it).
func (r *Runtime) Adopt(id string) error {
	if err := mcpbox.ValidateID(id); err != nil {
		return err
	}
	if r.eg.server == nil || r.eg.server.Serving(id) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(r.dir(id), egressDir)); err != nil {
		return nil // made without egress: it has no way out to restore
	}
	return r.listenEgress(id)
}

// forgetEgress stops serving sandbox id's egress.
func (r *Runtime) forgetEgress(id string) {
	if r.eg.server == nil {
		return
	}
	r.eg.mu.Lock()
	delete(r.eg.serving, id)
	r.eg.mu.Unlock()
	r.eg.server.Forget(id)
}

// sweepEgress stops serving sockets that are no longer ours: the sandbox
// was destroyed by another process, or another process adopted it and
// listens on the path now.
func (r *Runtime) sweepEgress() {
	for {
		time.Sleep(30 * time.Second)
		r.eg.mu.Lock()
		if len(r.eg.serving) == 0 {
			// Nothing left to watch: the next listenEgress starts another.
			r.eg.sweeper = false
			r.eg.mu.Unlock()
			return
		}
		ids := make(map[string]uint64, len(r.eg.serving))
		for id, ino := range r.eg.serving {
			ids[id] = ino
		}
		r.eg.mu.Unlock()
		for id, ino := range ids {
			var st unix.Stat_t
			err := unix.Stat(filepath.Join(r.dir(id), egressDir, egressSock), &st)
			if errors.Is(err, syscall.ENOENT) || (err == nil && st.Ino != ino) {
				r.forgetEgress(id)
			}
		}
	}
}

// openEgress runs in the sandbox's PID 1, before the pivot: it takes the
// egress directory's detached copy (or makes it, rootless) and returns
// the agent's relay configuration, which connects through it.
func openEgress(cfg *initConfig) (*agent.EgressConfig, error) {
	var tree *os.File
	switch {
	case cfg.EgressFD > 0:
		tree = os.NewFile(uintptr(cfg.EgressFD), "egress")
	case cfg.EgressDir != "":
		t, err := mount.Clone(nil, cfg.EgressDir, true)
		if err != nil {
			return nil, step("egress directory", err)
		}
		tree = t
	default:
		return nil, nil
	}
	// Kept open for the agent's life, and never inherited by user code.
	unix.CloseOnExec(int(tree.Fd()))
	egressTree = tree
	return &agent.EgressConfig{Upstream: "unix:/proc/self/fd/" + strconv.Itoa(int(tree.Fd())) + "/" + egressSock}, nil
}

// egressTree keeps the egress directory's descriptor referenced, so the
// garbage collector never closes it under the agent.
var egressTree *os.File
