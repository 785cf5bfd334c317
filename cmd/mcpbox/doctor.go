package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox/internal/linux/cgroup"
	"github.com/mcpbox/mcpbox/internal/linux/seccomp"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// finding is one line of the doctor's report. Status is ok, warn or FAIL;
// Fix says what to do when it is not ok.
type finding struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "FAIL"
)

func ok(f string, a ...any) finding        { return finding{"", statusOK, fmt.Sprintf(f, a...), ""} }
func warn(fix, f string, a ...any) finding { return finding{"", statusWarn, fmt.Sprintf(f, a...), fix} }
func fail(fix, f string, a ...any) finding { return finding{"", statusFail, fmt.Sprintf(f, a...), fix} }

// doctorChecks run in this order, one line each.
var doctorChecks = []struct {
	name string
	run  func(ctx context.Context, m *Main) finding
}{
	{"os", checkOS},
	{"privileges", checkPrivileges},
	{"user namespaces", checkUserNamespaces},
	{"namespaces", checkNamespaces},
	{"cgroups", checkCgroups},
	{"seccomp", checkSeccomp},
	{"overlayfs", checkOverlay},
	{"state directory", checkHome},
	{"resource limits", checkSysResource},
	{"inotify", checkInotify},
	{"python3", interpreter("python3", "python3", "--version")},
	{"node", interpreter("node", "nodejs", "--version")},
	{"sh", interpreter("sh", "dash", "")},
	{"bash", interpreter("bash", "bash", "--version")},
	{"python libraries", libraryCheck("python")},
	{"javascript libraries", libraryCheck("javascript")},
}

func (m *Main) doctorCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this host supports",
		Long: `Check what this host offers sandboxes, one line per check: ok, warn or FAIL
and, for anything missing, what to do about it. Exits 1 when a check FAILs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res := make([]finding, len(doctorChecks))
			count := map[string]int{}
			for i, c := range doctorChecks {
				res[i] = c.run(cmd.Context(), m)
				res[i].Check = c.name
				count[res[i].Status]++
			}
			if asJSON {
				enc := json.NewEncoder(m.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				printFindings(m, res, count)
			}
			if count[statusFail] > 0 {
				return &exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as a JSON array of {check, status, detail, fix}")
	return cmd
}

func printFindings(m *Main, res []finding, count map[string]int) {
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	for _, f := range res {
		line := f.Detail
		if f.Fix != "" {
			line += " — fix: " + f.Fix
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Status, f.Check, line)
	}
	tw.Flush()
	fmt.Fprintf(m.Stdout, "\n%d ok, %d warn, %d FAIL\n", count[statusOK], count[statusWarn], count[statusFail])
}

func checkOS(context.Context, *Main) finding {
	if runtime.GOOS != "linux" {
		return fail("run mcpbox on Linux", "%s: the local runtime needs Linux", runtime.GOOS)
	}
	v := kernelRelease()
	var major, minor int
	fmt.Sscanf(v, "%d.%d", &major, &minor)
	if major < 5 || major == 5 && minor < 11 {
		return warn("upgrade to kernel 5.11 or later",
			"Linux %s: sandboxes mount overlayfs inside a user namespace, which needs 5.11 (or a patched distribution kernel)", v)
	}
	return ok("Linux %s", v)
}

func checkPrivileges(context.Context, *Main) finding {
	if os.Geteuid() == 0 {
		return ok("root: sandboxes get 65536 mapped ids, cgroup limits (memory, pids, cpu) and rlimits")
	}
	return warn("run mcpbox as root for cgroup limits",
		"rootless (uid %d): sandboxes run through an unprivileged user namespace with one uid mapped, rlimits only and no cgroup limits", os.Geteuid())
}

// checkUserNamespaces reads the sysctls that gate user namespaces, then
// starts /bin/true in the namespaces a sandbox uses to be sure.
func checkUserNamespaces(ctx context.Context, _ *Main) finding {
	if n := readInt("/proc/sys/user/max_user_namespaces"); n == 0 {
		return fail("sysctl -w user.max_user_namespaces=15000", "user.max_user_namespaces is 0")
	}
	rootless := os.Geteuid() != 0
	if rootless && readInt("/proc/sys/kernel/unprivileged_userns_clone") == 0 {
		return fail("sysctl -w kernel.unprivileged_userns_clone=1, or run mcpbox as root",
			"kernel.unprivileged_userns_clone is 0: users without root cannot create user namespaces")
	}
	if rootless && readInt("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1 {
		return fail("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or run mcpbox as root",
			"AppArmor restricts unprivileged user namespaces")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		return fail("check user.max_user_namespaces and kernel.unprivileged_userns_clone, or run as root",
			"clone(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET) /bin/true: %v", err)
	}
	return ok("created user, mount, pid and net namespaces with uid %d mapped", os.Getuid())
}

func checkNamespaces(context.Context, *Main) finding {
	var missing []string
	for _, ns := range []string{"pid", "mnt", "net", "uts", "ipc", "cgroup"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 {
		return fail("use a kernel built with CONFIG_NAMESPACES and the matching CONFIG_*_NS options",
			"missing from /proc/self/ns: %s", strings.Join(missing, ", "))
	}
	return ok("pid, mnt, net, uts, ipc, cgroup")
}

func checkCgroups(context.Context, *Main) finding {
	info := cgroup.Probe()
	have, missing := []string{}, []string{}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if info.Controllers[c] {
			have = append(have, c)
		} else {
			missing = append(missing, c)
		}
	}
	version := info.Version
	if version == "hybrid" {
		version += " (cgroup2 at " + info.Unified + ")"
	}
	detail := fmt.Sprintf("cgroup %s, usable controllers: %s", version, strings.Join(have, ", "))
	switch {
	case os.Geteuid() != 0:
		return warn("run mcpbox as root for memory, pids and cpu limits", "%s; unused without root (rlimits only)", detail)
	case info.Version == "none":
		return fail("mount cgroup2 on /sys/fs/cgroup, or the v1 memory, pids and cpu hierarchies", "no cgroup filesystem mounted")
	case len(missing) > 0:
		return fail("enable "+strings.Join(missing, ", ")+" (v2: +"+strings.Join(missing, " +")+
			" in cgroup.subtree_control; v1: mount the hierarchy)", "%s; missing: %s", detail, strings.Join(missing, ", "))
	}
	return ok("%s", detail)
}

func checkSeccomp(context.Context, *Main) finding {
	if err := seccomp.Supported(); err != nil {
		return fail("use a kernel built with CONFIG_SECCOMP_FILTER", "seccomp filters unavailable: %v", err)
	}
	return ok("filters supported; the sandbox policy restricts %d syscalls", len(seccomp.Denied()))
}

func checkOverlay(context.Context, *Main) finding {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fail("mount /proc", "read /proc/filesystems: %v", err)
	}
	if strings.Contains(string(b), "\toverlay\n") { // lines are "[nodev]\t<name>\n"
		return ok("overlay in /proc/filesystems")
	}
	fix := "modprobe overlay, and add overlay to /etc/modules"
	if m, _ := filepath.Glob("/lib/modules/" + kernelRelease() + "/kernel/fs/overlayfs/overlay.ko*"); len(m) > 0 {
		return warn(fix, "overlay module not loaded yet (%s)", m[0])
	}
	return fail(fix, "overlay missing from /proc/filesystems")
}

// checkHome makes sure the state directory, or the nearest parent that
// exists, takes a new file; it leaves nothing behind.
func checkHome(_ context.Context, m *Main) finding {
	home := m.Home
	if home == "" {
		home = local.DefaultHome()
	}
	dir := home // the nearest directory that exists
	for _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && filepath.Dir(dir) != dir; _, err = os.Stat(dir) {
		dir = filepath.Dir(dir)
	}
	f, err := os.CreateTemp(dir, ".mcpbox-doctor-")
	if err != nil {
		return fail("set MCPBOX_HOME to a writable directory", "%s: %v", home, err)
	}
	f.Close()
	os.Remove(f.Name())
	if dir != home {
		return ok("%s can be created", home)
	}
	return ok("%s writable", home)
}

// interpreter checks that prog is in the host template (the host's /usr,
// which sandboxes see read-only) and reports its version.
func interpreter(prog, pkg, versionFlag string) func(context.Context, *Main) finding {
	return func(ctx context.Context, _ *Main) finding {
		for _, dir := range []string{"/usr/bin", "/usr/local/bin"} {
			path := filepath.Join(dir, prog)
			if _, err := exec.LookPath(path); err != nil {
				continue
			}
			if versionFlag == "" {
				if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
					return ok("%s -> %s", path, real)
				}
				return ok("%s", path)
			}
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, path, versionFlag)
			cmd.WaitDelay = time.Second // do not wait on a child left holding the pipe
			out, err := cmd.CombinedOutput()
			if err != nil {
				return warn("reinstall it: apt-get install --reinstall "+pkg, "%s %s: %v", path, versionFlag, err)
			}
			first, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
			return ok("%s: %s", path, first)
		}
		f := warn("apt-get install "+pkg, "not found in /usr/bin or /usr/local/bin")
		if prog == "sh" {
			f.Status = statusFail
		}
		return f
	}
}

// readInt returns the integer in a /proc file, or -1 when it is absent.
func readInt(path string) int {
	n := -1
	if b, err := os.ReadFile(path); err == nil {
		fmt.Sscan(string(b), &n)
	}
	return n
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// checkSysResource: without CAP_SYS_RESOURCE root can neither lower the
// agent's oom_score_adj below its children's nor lift the per-user limits
// each sandbox inherits, so sandboxes share root's.
func checkSysResource(context.Context, *Main) finding {
	if os.Geteuid() != 0 {
		return ok("not root: sandboxes run rootless (see privileges)")
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return warn("", "cannot read /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, found := strings.CutPrefix(line, "CapEff:"); found {
			var caps uint64
			fmt.Sscanf(strings.TrimSpace(hex), "%x", &caps)
			const capSysResource = 24
			if caps&(1<<capSysResource) != 0 {
				return ok("CAP_SYS_RESOURCE: agents are the OOM killer's last choice; per-user limits are each sandbox's own")
			}
			return warn("run mcpbox with CAP_SYS_RESOURCE (a container: --cap-add SYS_RESOURCE)",
				"root lacks CAP_SYS_RESOURCE: a sandbox's agent is protected from the OOM killer only by its children's higher score, and sandboxes share root's message-queue and signal limits")
		}
	}
	return warn("", "no CapEff line in /proc/self/status")
}

// checkInotify: every sandbox's inotify instances count against root's
// allowance too (see README, "What is isolated, and what is not").
func checkInotify(context.Context, *Main) finding {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		return warn("", "cannot read fs.inotify.max_user_instances: %v", err)
	}
	var n int
	fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &n)
	const perSandbox, sandboxes = 32, 20
	if want := 128 + perSandbox*sandboxes; n < want {
		return warn(fmt.Sprintf("sysctl -w fs.inotify.max_user_instances=%d (about 128 + 32 per live sandbox)", want),
			"fs.inotify.max_user_instances is %d: as few as %d sandboxes (up to %d instances each) can use up root's, and then file watchers fail for root's services and other sandboxes", n, n/perSandbox, perSandbox)
	}
	return ok("fs.inotify.max_user_instances %d", n)
}
