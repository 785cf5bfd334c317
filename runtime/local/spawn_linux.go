package local

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox/internal/linux/mount"
)

// handoff is what the host gives a new sandbox's PID 1: its listening
// socket, the config pipe, the readiness pipe, a log for its stderr, its
// scratch directory as its working directory and, as root, a read-only
// copy of the kernel drivers.
type handoff struct {
	ln, cfgR, cfgW, readyR, readyW, log *os.File
	scratch                             *os.File // O_PATH
	kernels                             *os.File // detached mount tree; nil without
	layers                              *os.File // a template's layer store, detached; nil without
	layersFD                            int      // the fd the child finds layers at
	egress                              *os.File // the egress directory, detached; nil without
	egressFD                            int      // the fd the child finds it at
	egressDir                           string   // rootless: its path, for the child to clone
}

// openHandoff creates the socket at sockPath and the pipes and log in dir.
func (r *Runtime) openHandoff(dir, sockPath string) (*handoff, error) {
	h := &handoff{}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on agent socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	h.ln, err = ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("agent socket fd: %w", err)
	}
	if err := os.Chmod(sockPath, 0o600); err != nil {
		h.close()
		return nil, fmt.Errorf("chmod agent socket: %w", err)
	}
	if h.cfgR, h.cfgW, err = os.Pipe(); err == nil {
		h.readyR, h.readyW, err = os.Pipe()
	}
	if err == nil {
		h.log, err = os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	if err == nil {
		h.scratch, err = os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// openKernels hands h a read-only copy of dir, the kernel drivers the
// sandbox gets (kernelsFor), as root. Rootless, PID 1 clones it by its
// path (initConfig.KernelsDir).
func (r *Runtime) openKernels(h *handoff, dir string) {
	if r.rootless || dir == "" {
		return
	}
	// A host descriptor cannot be bound from in the sandbox's mount
	// namespace, but a detached copy can be attached there.
	var err error
	if h.kernels, err = mount.Clone(nil, dir, true); err != nil {
		r.log.Warn("kernels will compile their driver at every start", "err", err)
	}
}

// closeChildEnds releases what only the child needed, once it started.
func (h *handoff) closeChildEnds() {
	for _, f := range []*os.File{h.cfgR, h.readyW, h.kernels, h.layers, h.egress} {
		if f != nil {
			f.Close()
		}
	}
}

// close releases the host's copies; closing one twice is harmless.
func (h *handoff) close() {
	for _, f := range []*os.File{h.ln, h.cfgR, h.cfgW, h.readyR, h.readyW, h.log, h.scratch, h.kernels, h.layers, h.egress} {
		if f != nil {
			f.Close()
		}
	}
}

// command is the clone of the sandbox's PID 1: the mcpbox binary again, in
// new namespaces, with its uid and gid maps, and the uid user code will run
// as inside. It has no Dir: it starts in its scratch directory (spawnIn).
func (r *Runtime) command(h *handoff) (*exec.Cmd, int) {
	extra := []*os.File{h.ln, h.cfgR, h.readyW} // fds 3, 4, 5: see the package doc
	if h.kernels != nil {
		extra = append(extra, h.kernels) // fd 6
	}
	if h.layers != nil {
		extra = append(extra, h.layers) // fd 6 or 7: initConfig.LayersFD
		h.layersFD = 2 + len(extra)
	}
	if h.egress != nil {
		extra = append(extra, h.egress) // after the others: initConfig.EgressFD
		h.egressFD = 2 + len(extra)
	}
	cmd := &exec.Cmd{
		Path:       r.exe,
		Args:       append([]string{"mcpbox"}, InitArgs...),
		Env:        []string{"PATH=" + DefaultPath},
		Stdout:     h.log,
		Stderr:     h.log,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWCGROUP,
			Setsid: true,
		},
	}
	// A new user namespace does not change the process's own uid: it must
	// become root of the namespace (setuid(0) after the maps are written)
	// or exec would drop every capability it has there.
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: r.rootless}
	uid := SandboxUID
	if r.rootless {
		uid = 0
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	} else {
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: r.uidBase, Size: 65536}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: r.uidBase, Size: 65536}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true
	}
	return cmd, uid
}

// agentOOMScoreAdj is the agent's oom_score_adj: when its sandbox runs
// out of memory, the kernel kills user code (the agent raises every
// process it starts to reaper.ChildOOMScoreAdj) and the agent lives to
// report it. Not -1000, which would make it unkillable: a child may lower
// its own score to the lowest its parent was given by privilege, and a
// sandbox whose processes are all unkillable has nothing the OOM killer
// can take, so it hangs instead. At -999 the agent goes last, as it
// should, and someone always can.
const agentOOMScoreAdj = -999

// protectAgent lowers the oom_score_adj of the agent. That takes
// CAP_SYS_RESOURCE, which root in a container often lacks: the agent then
// keeps this process's score, still below its children's, and the
// runtime says so once.
func (r *Runtime) protectAgent(pid int) {
	err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(agentOOMScoreAdj)), 0)
	if err != nil {
		r.oomWarn.Do(func() {
			r.log.Info("agents keep this process's oom_score_adj; only the higher score of what they start protects them",
				"pid", pid, "err", err)
		})
	}
}

// spawnRequest is one start for the spawner thread.
type spawnRequest struct {
	cmd  *exec.Cmd
	dir  *os.File // the child's working directory
	done chan error
}

var (
	spawnOnce sync.Once
	spawns    chan<- spawnRequest // nil when the spawner thread could not be made
	spawnErr  error               // why it could not
)

// spawnIn starts cmd with dir as its working directory (cmd.Dir must be
// empty) from one OS thread that this process keeps for its whole life,
// for two reasons.
//
// Pdeathsig (an ephemeral sandbox dies with its creator) is sent when the
// thread that forked the child exits, not the process, and Go ends a
// thread whenever a goroutine that locked it returns without unlocking.
// This thread never ends.
//
// And the child must start in its scratch directory, which it could not
// walk to itself (see the package doc): the kernel moves a working
// directory into the child's new mount namespace with it. So this thread
// has a working directory of its own (unshare CLONE_FS) and changes it to
// the scratch directory for each start.
func spawnIn(dir *os.File, cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		reqs := make(chan spawnRequest)
		ready := make(chan error)
		go spawner(reqs, ready)
		if spawnErr = <-ready; spawnErr == nil {
			spawns = reqs
		}
	})
	if spawns == nil {
		return spawnErr
	}
	req := spawnRequest{cmd: cmd, dir: dir, done: make(chan error, 1)}
	spawns <- req
	return <-req.done
}

// spawner serves spawnIn on a thread it never gives back to the runtime.
func spawner(reqs <-chan spawnRequest, ready chan<- error) {
	runtime.LockOSThread() // never unlocked: see spawnIn
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		ready <- fmt.Errorf("spawner thread: unshare CLONE_FS: %w", err)
		return
	}
	ready <- nil
	for req := range reqs {
		req.done <- startIn(req.dir, req.cmd)
	}
}

func startIn(dir *os.File, cmd *exec.Cmd) error {
	if err := unix.Fchdir(int(dir.Fd())); err != nil {
		return fmt.Errorf("chdir to the scratch directory: %w", err)
	}
	// Back to / afterwards, not to hold a directory Destroy removes.
	defer unix.Chdir("/")
	return cmd.Start()
}
