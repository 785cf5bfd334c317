// Package local is the embedded default sandbox backend: it runs each
// sandbox on this Linux machine with namespaces, cgroups and seccomp, and
// needs no Docker engine, no KVM and nothing else installed.
//
// # How a sandbox starts
//
// The host side (Runtime.Create) creates the sandbox directory and a Unix
// socket listening in it, then re-executes the mcpbox binary through
// /proc/self/exe in new user, pid, mount, net, uts, ipc and cgroup
// namespaces. The child starts in the sandbox directory, its working
// directory (it could not walk there: see below), and holds these file
// descriptors:
//
//	fd 3  the agent's listening socket (nothing inside can open it by path)
//	fd 4  the sandbox configuration, JSON; written only after the child was
//	      placed in its cgroups, so it also means "go"
//	fd 5  the readiness report: {"ok":true} or {"error":"<step>: <cause>"}
//	fd 6  as root, when the config says so: the kernel drivers, a detached
//	      read-only copy of $MCPBOX_HOME/kernels (open_tree) to attach, or
//	      of the template's own, template-kernels/<key> (pydriver_linux.go)
//
// The child (InitMain, PID 1 of the new pid namespace) closes any other
// descriptor it inherited, builds the sandbox root — a size-limited tmpfs
// attached on its working directory, holding an overlay's lower, upper
// and work directories, read-only binds of the host's /usr and a few /etc
// files, a fresh /proc with sensitive files masked, a minimal /dev —
// pivots into it, brings up lo, sets rlimits, drops its capability
// bounding set, sets no_new_privs and installs the seccomp filter for
// itself and every future child, reports ready and becomes the agent.
//
// Why a working directory and a mount tree rather than paths or plain
// directory descriptors: $MCPBOX_HOME is private to its owner (0700), and
// the child runs as a mapped uid with no rights over the host's files, so
// it cannot walk to any path in it. Nor can it mount on, or bind from, a
// descriptor the host opened: that names a mount of the host's mount
// namespace, which the kernel refuses in another. A working directory is
// moved into the new mount namespace with the process, and a detached
// tree may be attached anywhere. The host starts every sandbox from one
// thread that lives as long as the process and has a working directory
// of its own (spawn_linux.go), which also keeps an ephemeral sandbox's
// Pdeathsig from firing before its creator dies.
//
// # Memory, disk and the OOM killer
//
// A sandbox's disk is its tmpfs, whose pages are memory charged to the
// sandbox's memory cgroup. The cgroup's limit is therefore the flavor's
// memory plus its disk: a full disk fails writes with ENOSPC (the tmpfs's
// own limit) and leaves processes the flavor's memory. When processes
// take more, the OOM killer picks among them: the agent gives everything
// it starts an oom_score_adj of 1000 and the host lowers the agent's to
// -999 (where it may: that takes CAP_SYS_RESOURCE), so user code dies,
// the agent reports it, and the sandbox lives on.
//
// # Layout on the host
//
//	$MCPBOX_HOME/sessions/<id>/agent.sock     the agent's socket
//	$MCPBOX_HOME/sessions/<id>/sandbox.json   what Destroy and List need after a restart
//	$MCPBOX_HOME/sessions/<id>/agent.log      the agent's stderr
//	$MCPBOX_HOME/template-kernels/<key>/      a template's own compiled Python driver
//
// Everything under $MCPBOX_HOME is private to its owner: directories
// 0700, files 0600. The exceptions are kernels/ and
// template-kernels/<key>, the kernel drivers (public code, compiled) that
// a sandbox's user reads through its read-only copy; the home's own 0700
// keeps other host users out of them. Inside its own mount namespace the sandbox
// attaches its tmpfs over sessions/<id>: the host keeps seeing the files
// above.
//
// Without root the same path runs through an unprivileged user namespace
// with one uid mapped: there are no cgroup limits, only rlimits, and user
// code runs as the mapped uid (root inside, without capabilities).
package local

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
)

// InitArgs are the arguments a sandbox's PID 1 is started with: `mcpbox
// agent --sandbox-init`, the agent's one entry point, told to set the
// sandbox up first (see InitMain). main and TestMain check for them, with
// IsInit, before anything else.
var InitArgs = []string{"agent", "--sandbox-init"}

// IsInit reports whether args (os.Args[1:]) make this process a sandbox's
// PID 1.
func IsInit(args []string) bool {
	return len(args) == len(InitArgs) && args[0] == InitArgs[0] && args[1] == InitArgs[1]
}

// Options configure a Runtime. The zero value is usable.
type Options struct {
	// Home is the state directory ($MCPBOX_HOME); default DefaultHome().
	Home string
	// Exe is the binary re-executed as the agent; default /proc/self/exe,
	// which works even when the binary's directory is not readable by the
	// sandbox's mapped uid (go test and go run build into 0700 dirs).
	Exe string
	// UIDBase is the host uid (and gid) that root inside a sandbox maps to
	// when mcpbox runs as root; 65536 ids from there are mapped. Default
	// 100000, the usual start of subordinate ids.
	UIDBase int
	// CgroupParent is the cgroup every sandbox's group is created under;
	// default "mcpbox".
	CgroupParent string
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Egress is the host-side egress proxy sandboxes reach the network
	// through (egress_linux.go says how); nil leaves them no way out, and
	// Create refuses a network policy.
	Egress EgressServer
}

// EgressServer is the egress proxy as the runtime uses it (egress.Proxy
// is one): it serves a sandbox's relayed connections on a listener made
// for that sandbox alone, which is how it knows whose they are.
type EgressServer interface {
	Serve(session string, ln net.Listener) error
	Forget(session string)
	Serving(session string) bool
}

// DefaultHome is /var/lib/mcpbox as root and ~/.local/share/mcpbox
// otherwise, unless $MCPBOX_HOME says where.
func DefaultHome() string {
	if h := os.Getenv("MCPBOX_HOME"); h != "" {
		return h
	}
	if os.Geteuid() == 0 {
		return "/var/lib/mcpbox"
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "share", "mcpbox")
	}
	return filepath.Join(os.TempDir(), "mcpbox")
}

// SandboxUID is the uid user code runs as inside a sandbox when mcpbox runs
// as root; SandboxHome is its home.
const (
	SandboxUID  = 1000
	SandboxHome = "/home/user"
	// Workspace is the default working directory of user code.
	Workspace = "/workspace"
)

// DefaultPath is PATH inside the sandbox.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
