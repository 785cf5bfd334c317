package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agent"
	"github.com/mcpbox/mcpbox/agent/reaper"
	"github.com/mcpbox/mcpbox/internal/linux/caps"
	"github.com/mcpbox/mcpbox/internal/linux/fds"
	"github.com/mcpbox/mcpbox/internal/linux/loopback"
	"github.com/mcpbox/mcpbox/internal/linux/mount"
	"github.com/mcpbox/mcpbox/internal/linux/rootfs"
	"github.com/mcpbox/mcpbox/internal/linux/seccomp"
	"github.com/mcpbox/mcpbox/internal/linux/ucount"
)

// stepError names the setup step that failed, so a broken sandbox says
// "pivot_root: operation not permitted", never "exit status 1".
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{name, err}
}

// sandboxKernels is where the precompiled kernel drivers appear inside a
// sandbox, read-only.
const sandboxKernels = "/opt/mcpbox"

// The descriptors the host hands the sandbox's PID 1 (see the package doc).
const (
	fdListener = 3
	fdConfig   = 4
	fdReady    = 5
	fdKernels  = 6 // absent unless initConfig.KernelsFD
	// fd 6 or 7 (after the kernels, when they are there): a template's
	// layer store, initConfig.LayersFD.
	// Then the egress directory, initConfig.EgressFD: at most fd 8.
	fdLast = 8
)

// initConfig is what the host sends the sandbox's PID 1 on fd 4.
type initConfig struct {
	ID        string            `json:"id"`
	DiskBytes int64             `json:"disk_bytes"`
	Pids      int64             `json:"pids"`
	UID       int               `json:"uid"` // user code's uid (and gid) inside
	Env       map[string]string `json:"env"`
	Volumes   []mcpbox.Volume   `json:"volumes,omitempty"`
	Prestart  []string          `json:"prestart,omitempty"`
	// KernelsFD says fd 6 holds the kernel drivers, bound at
	// sandboxKernels: a detached, read-only copy of the host's directory.
	KernelsFD bool `json:"kernels_fd,omitempty"`
	// KernelsDir is the host's directory of kernel drivers when the host
	// could not copy it (rootless: no open_tree without privilege; this
	// process then runs as the home's owner and may walk to it).
	KernelsDir string `json:"kernels_dir,omitempty"`
	// Template names the sandbox's template; "" is the host's. Layers
	// are its layers' directories in the layer store, top first; the
	// store is a detached read-only copy at fd LayersFD, or (rootless)
	// the host directory LayersDir. Workdir is user code's directory
	// when the template names one. HostSystem says the template is
	// based on the host's system: its layers go beneath the host's /usr
	// binds (mcpbox.Template.HostSystem).
	Template   string   `json:"template,omitempty"`
	Layers     []string `json:"layers,omitempty"`
	LayersFD   int      `json:"layers_fd,omitempty"`
	LayersDir  string   `json:"layers_dir,omitempty"`
	Workdir    string   `json:"workdir,omitempty"`
	HostSystem bool     `json:"host_system,omitempty"`
	// EgressFD is the fd of the egress directory's detached copy, or
	// (rootless) EgressDir its host path; neither without egress. See
	// egress_linux.go.
	EgressFD  int    `json:"egress_fd,omitempty"`
	EgressDir string `json:"egress_dir,omitempty"`

	egress *agent.EgressConfig // what openEgress made of them
}

// InitMain runs as PID 1 of a new sandbox: it builds the sandbox, reports
// ready on fd 5 and serves the agent until told to stop. It never returns.
func InitMain() {
	ready := os.NewFile(fdReady, "ready")
	report := func(v any) {
		b, _ := json.Marshal(v)
		ready.Write(append(b, '\n'))
	}
	// Before anything else: whatever reached this process without
	// close-on-exec beyond what the host handed it (a directory is a way
	// out of the sandbox's root) must not reach user code, nor stay here.
	if _, err := fds.CloseInherited(fdLast + 1); err != nil {
		report(map[string]string{"error": step("close inherited descriptors", err).Error()})
		os.Exit(1)
	}
	cfg, ln, err := setup()
	if err != nil {
		report(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	// The agent relays bytes between one client and a few kernels: one
	// thread does that without the cross-thread wake-ups and idle spinning
	// that cost more CPU than the work itself with many sandboxes busy.
	runtime.GOMAXPROCS(1)
	// Past RLIMIT_FSIZE a write fails with EFBIG instead of killing PID 1.
	signal.Ignore(syscall.SIGXFSZ)

	env := map[string]string{
		"PATH": DefaultPath,
		"HOME": SandboxHome,
		"LANG": "C.UTF-8",
		"TERM": "xterm-256color",
		"USER": "user",
	}
	if cfg.UID == 0 {
		env["USER"] = "root"
	}
	maps.Copy(env, cfg.Env)
	kernels := ""
	if cfg.KernelsFD || cfg.KernelsDir != "" {
		kernels = sandboxKernels
	}
	cwd := Workspace
	if cfg.Workdir != "" {
		cwd = cfg.Workdir
	}
	// From here on this is `mcpbox agent`, as on any backend.
	err = agent.Run(context.Background(), &agent.Config{
		UID:  cfg.UID,
		GID:  cfg.UID,
		Home: SandboxHome,
		Cwd:  cwd,
		Env:  env,
		// Started before the host's health check: the interpreter boots
		// while the host finishes creating the sandbox.
		Prestart:      cfg.Prestart,
		KernelModules: kernels,
		// Nothing larger than the disk can be stored anyway; saying 413
		// up front beats a 507 halfway through.
		MaxFileBytes: cfg.DiskBytes,
		Egress:       cfg.egress,
	}, func() {
		report(map[string]bool{"ok": true})
		ready.Close()
	}, ln)
	if errors.Is(err, agent.ErrDeadlinePassed) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func setup() (*initConfig, net.Listener, error) {
	var cfg initConfig
	cf := os.NewFile(fdConfig, "config")
	if err := json.NewDecoder(cf).Decode(&cfg); err != nil {
		return nil, nil, step("read config", err)
	}
	cf.Close()
	lf := os.NewFile(fdListener, "agent.sock")
	ln, err := net.FileListener(lf)
	if err != nil {
		return nil, nil, step("agent listener", err)
	}
	lf.Close()

	// The host started this process in its scratch directory (the
	// package doc says why): that working directory, in this mount
	// namespace, is where the root is built. open_tree without a clone is
	// an O_PATH open, and an empty path needs no right to search it.
	scratch, err := unix.OpenTree(unix.AT_FDCWD, "", unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, nil, step("open scratch directory (the working directory)", err)
	}
	opts := rootfs.Options{Scratch: os.NewFile(uintptr(scratch), "scratch"), DiskBytes: cfg.DiskBytes,
		UID: cfg.UID, Home: SandboxHome, Workspace: Workspace, KernelsAt: sandboxKernels}
	defer opts.Scratch.Close()
	switch {
	case cfg.KernelsFD:
		opts.Kernels = os.NewFile(fdKernels, "kernels")
	case cfg.KernelsDir != "":
		if opts.Kernels, err = mount.Clone(nil, cfg.KernelsDir, true); err != nil {
			return nil, nil, step("kernel drivers", err)
		}
	}
	if opts.Kernels != nil {
		defer opts.Kernels.Close()
	}
	if err := templateOptions(&cfg, &opts); err != nil {
		return nil, nil, err
	}
	if opts.Layers != nil {
		defer opts.Layers.Close()
	}
	for _, v := range cfg.Volumes {
		opts.Volumes = append(opts.Volumes, rootfs.Volume{Root: v.Root, HostPath: v.HostPath,
			SandboxPath: v.SandboxPath, ReadOnly: v.ReadOnly})
	}
	root, err := rootfs.Build(opts)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	// After the root is built: binding a volume takes a mount namespace
	// of its own for a moment (open_tree), and the limits allow none.
	// Before the pivot: the sandbox's /proc/sys is read-only.
	if err := step("limit kernel objects per user", ucount.Set(userNamespaceLimits)); err != nil {
		return nil, nil, err
	}
	// Before the pivot: rootless, the directory is cloned by its path.
	if cfg.egress, err = openEgress(&cfg); err != nil {
		return nil, nil, err
	}
	if err := rootfs.Pivot(root); err != nil {
		return nil, nil, err
	}
	if cfg.Template != "" {
		if err := rootfs.EnsureUser(cfg.UID, SandboxHome); err != nil {
			return nil, nil, err
		}
	}
	if err := step("sethostname", unix.Sethostname([]byte("sandbox"))); err != nil {
		return nil, nil, err
	}
	if err := loopback.Up(); err != nil {
		return nil, nil, err
	}
	if err := setRlimits(cfg); err != nil {
		return nil, nil, err
	}
	// The bounding set is per thread: drop it on the thread every user
	// process is forked from (and on this one, for good measure).
	if err := caps.DropBoundingSet(); err != nil {
		return nil, nil, err
	}
	if err := reaper.OnSpawnerThread(caps.DropBoundingSet); err != nil {
		return nil, nil, err
	}
	if err := step("seccomp", seccomp.Install()); err != nil {
		return nil, nil, err
	}
	return &cfg, ln, nil
}

// userNamespaceLimits are the sandbox's own maximums, per uid inside it,
// for kernel objects the kernel also charges to the host user that made
// the sandbox's user namespace (root, for everything every sandbox makes;
// see internal/linux/ucount). Without them a new namespace allows
// INT_MAX, so one sandbox could take the host root's whole allowance
// (128 inotify instances by default) from the host and every other
// sandbox. User code and the agent (its file watchers) each get these.
var userNamespaceLimits = map[string]int64{
	// Enough for a few file watchers (a dev server, an editor's); watches
	// are what a watcher of a big tree needs many of.
	"max_inotify_instances": 16,
	"max_inotify_watches":   8192,
	// fanotify_init and every way to a new namespace are denied by the
	// seccomp filter: zero is the second fence.
	"max_fanotify_groups":   0,
	"max_fanotify_marks":    0,
	"max_user_namespaces":   0,
	"max_pid_namespaces":    0,
	"max_uts_namespaces":    0,
	"max_ipc_namespaces":    0,
	"max_net_namespaces":    0,
	"max_mnt_namespaces":    0,
	"max_cgroup_namespaces": 0,
	"max_time_namespaces":   0,
}

// Resource limits that also bound what the kernel charges up the user
// namespace chain to the host user (see the README's security section).
const (
	// msgqueueBytes bounds POSIX message queues: three of the default
	// size (10 messages of 8 KiB). The host root's own allowance is its
	// RLIMIT_MSGQUEUE, 800 KiB by default, shared with every sandbox.
	msgqueueBytes = 256 << 10
	// sigpending bounds queued signals (sigqueue, timers) per uid.
	sigpending = 1024
	// memlockBytes bounds locked memory (mlock, SHM_LOCK): the classic
	// default, before Linux 5.16 raised it to 8 MiB.
	memlockBytes = 64 << 10
	// agentTasks are kept out of user code's share of the pids limit
	// (RLIMIT_NPROC counts the tasks of one uid in the sandbox), so a fork
	// bomb cannot keep the agent from starting a thread. It runs about 7.
	agentTasks = 16
)

// setRlimits is the second fence behind the cgroups (and the only one
// without root). Children inherit the limits. None is raised above what
// this process was started with.
func setRlimits(cfg initConfig) error {
	limits := []struct {
		name     string
		resource int
		value    uint64
	}{
		{"NOFILE", unix.RLIMIT_NOFILE, 8192},
		{"FSIZE", unix.RLIMIT_FSIZE, uint64(cfg.DiskBytes)},
		{"CORE", unix.RLIMIT_CORE, 0},
		{"NPROC", unix.RLIMIT_NPROC, uint64(cfg.Pids - min(agentTasks, cfg.Pids/2))},
		{"MSGQUEUE", unix.RLIMIT_MSGQUEUE, msgqueueBytes},
		{"SIGPENDING", unix.RLIMIT_SIGPENDING, sigpending},
		{"MEMLOCK", unix.RLIMIT_MEMLOCK, memlockBytes},
	}
	for _, l := range limits {
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.resource, &cur); err != nil {
			return step("getrlimit "+l.name, err)
		}
		v := min(l.value, cur.Max)
		rl := unix.Rlimit{Cur: v, Max: v}
		if err := unix.Setrlimit(l.resource, &rl); err != nil {
			return step("setrlimit "+l.name, err)
		}
	}
	return nil
}
