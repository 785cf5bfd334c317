package local_test

// The containment suite: hostile programs, each in its own sandbox, each
// asserting that the host and other sandboxes are unaffected. TestMain
// asserts afterwards that nothing of any sandbox is left on the host.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// tiny is a flavor small enough that filling its limits is quick.
var tiny = mcpbox.Flavor{Name: "tiny", CPUs: 1, MemoryBytes: 256 << 20, DiskBytes: 64 << 20, Pids: 64}

func newTinySandbox(t *testing.T, rt *local.Runtime) (*mcpbox.Sandbox, *agentclient.Client) {
	t.Helper()
	return newSandbox(t, rt, tiny)
}

// assertGone checks that nothing of sb is left: its agent, any process in
// its cgroups, its cgroup directories and its state directory.
func assertGone(t testing.TB, rt *local.Runtime, sb *mcpbox.Sandbox) {
	t.Helper()
	if pid := agentPID(sb.ID); pid > 0 && syscall.Kill(pid, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !bytes.Contains(st, []byte(") Z ")) {
			t.Errorf("agent pid %d still alive after destroy", pid)
		}
	}
	for _, h := range []string{"memory", "pids", "cpu", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "mcpbox", sb.ID)); err == nil {
			t.Errorf("cgroup %s/mcpbox/%s left behind", h, sb.ID)
		}
	}
	if _, err := os.Stat(filepath.Join(rt.Home(), "sessions", sb.ID)); err == nil {
		t.Errorf("sandbox directory left behind")
	}
}

// sh runs a shell line in the sandbox as its user.
func sh(t *testing.T, c *agentclient.Client, timeout time.Duration, line string) (string, *agentclient.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	res, err := c.Run(ctx, agentclient.Command{Cmd: "/bin/sh", Args: []string{"-c", line}}, &out, &out)
	return out.String(), res, err
}

func mustSh(t *testing.T, c *agentclient.Client, line string) (string, int) {
	t.Helper()
	out, res, err := sh(t, c, 30*time.Second, line)
	if err != nil {
		t.Fatalf("%q: %v (output %q)", line, err, out)
	}
	return out, res.ExitCode
}

// hostCanFork checks that the host can still start processes.
func hostCanFork(t *testing.T) {
	t.Helper()
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("host cannot fork: %v", err)
	}
}

// TestContainForkBomb judges from the host: once the bomb has used up its
// share of tasks, the sandbox cannot be asked to start anything, not even
// a check.
func TestContainForkBomb(t *testing.T) {
	rt := newRuntime(t)
	sb, c := newTinySandbox(t, rt)
	pids := pidsCgroup(t, sb.ID)
	// The bomb runs in the background; the limits must hold it. Its
	// failed forks say so in bomb.err, read through the agent's root.
	mustSh(t, c, `(b() { b | b & }; b) >/dev/null 2>>/tmp/bomb.err &`)
	errs := fmt.Sprintf("/proc/%d/root/tmp/bomb.err", rt.PID(sb.ID))
	waitUntil(t, 30*time.Second, "the bomb to run out of tasks", func() bool {
		b, _ := os.ReadFile(errs)
		return len(b) > 0
	})
	if n := cgroupInt(t, filepath.Join(pids, "pids.current")); n > tiny.Pids {
		t.Errorf("%d tasks in a sandbox limited to %d", n, tiny.Pids)
	}
	hostCanFork(t)
	// User code's share of the tasks leaves the agent room for threads.
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("the agent is gone with the bomb: %v", err)
	}
	c.Close()
	if err := rt.Destroy(context.Background(), sb.ID); err != nil {
		t.Fatalf("destroy a sandbox full of bombs: %v", err)
	}
	assertGone(t, rt, sb)
}

// pidsCgroup is the directory of the sandbox's pids controller, on cgroup
// v1 or v2.
func pidsCgroup(t *testing.T, id string) string {
	t.Helper()
	for _, d := range []string{"/sys/fs/cgroup/pids/mcpbox/" + id, "/sys/fs/cgroup/mcpbox/" + id} {
		if _, err := os.Stat(filepath.Join(d, "pids.current")); err == nil {
			return d
		}
	}
	t.Skip("skipped: no pids controller for the sandbox on this host")
	return ""
}

func cgroupInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// waitUntil polls cond until it holds, failing t if it does not within
// limit: the limit is a bound on a hang, never the thing asserted.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestContainMemoryBomb(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	out, res, err := sh(t, c, 60*time.Second, `exec python3 -c 'a = []
while True: a.append(bytearray(16 << 20))'`)
	if err != nil {
		t.Fatalf("%v (%s)", err, out)
	}
	if res.Exited || !strings.Contains(res.Status, "killed") {
		t.Errorf("memory bomb ended with %+v, want killed by the OOM killer", res)
	}
	hostCanFork(t)
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("agent died with the bomb: %v", err)
	}
	if out, code := mustSh(t, c, "echo still here"); code != 0 || out != "still here\n" {
		t.Errorf("next command after the bomb: exit %d, %q", code, out)
	}
}

func TestContainDiskFill(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	for _, dir := range []string{"/tmp", "/workspace", "/home/user"} {
		out, code := mustSh(t, c, fmt.Sprintf(`dd if=/dev/zero of=%s/fill bs=1M count=200 2>&1; rc=$?; ls -l %s/fill; rm -f %s/fill; exit $rc`, dir, dir, dir))
		if code == 0 {
			t.Errorf("%s: writing 200 MiB into a 64 MiB sandbox succeeded:\n%s", dir, out)
		}
		if !strings.Contains(out, "No space left") && !strings.Contains(out, "File too large") {
			t.Errorf("%s: want ENOSPC or EFBIG, got:\n%s", dir, out)
		}
	}
}

func TestContainCPUSpinTimeout(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	_, _, err := sh(t, c, time.Second, `while :; do :; done`)
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("spin past its timeout: err = %v, want deadline exceeded", err)
	}
	// The spinning shell must be gone, not merely disconnected.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := mustSh(t, c, `ps -eo args= 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\0' ' '`)
		if !strings.Contains(out, "while :") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spinning process survived its timeout:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestContainHostSecrets(t *testing.T) {
	rt := newRuntime(t)
	marker := "hostsecret" + testutil.ID()
	t.Setenv("MCPBOX_TEST_SECRET", marker)
	secretFile := filepath.Join(os.TempDir(), "mcpbox-secret-"+testutil.ID())
	if err := os.WriteFile(secretFile, []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secretFile) })
	_, c := newTinySandbox(t, rt)
	out, _ := mustSh(t, c, `cat /etc/shadow /root/* `+secretFile+` 2>&1; env; grep -rs '`+marker[:1]+"["+marker[1:2]+"]"+marker[2:]+`' /proc/[0-9]*/environ /etc /tmp /root /home /workspace; ls /proc | grep -c '^[0-9]'; ls /sys 2>&1`)
	if strings.Contains(out, marker) {
		t.Errorf("host secret visible in the sandbox:\n%s", out)
	}
	if !strings.Contains(out, "cannot access '/sys'") {
		t.Errorf("/sys exists in the sandbox:\n%s", out)
	}
	// Only the sandbox's own processes are visible: the agent, the shell
	// and what it runs.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if n, _ := strconv.Atoi(lines[len(lines)-2]); n == 0 || n > 8 {
		t.Errorf("sandbox sees %d processes, want only its own few", n)
	}
}

func TestContainWriteHostPaths(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	name := "evil" + testutil.ID()
	for _, p := range []string{"/usr/bin/", "/bin/", "/lib/", "/etc/ssl/", "/usr/local/", "/opt/mcpbox/"} {
		out, code := mustSh(t, c, "echo x > "+p+name)
		if code == 0 {
			t.Errorf("wrote %s%s inside the sandbox: %s", p, name, out)
		}
		if _, err := os.Stat(p + name); err == nil {
			os.Remove(p + name)
			t.Errorf("sandbox created %s%s on the host", p, name)
		}
	}
	// Every sandbox's Python kernel runs the driver bound there from the
	// host: it must not be replaceable from inside.
	if out, code := mustSh(t, c, "echo 'import os' > /opt/mcpbox/mcpbox_kernel.py"); code == 0 {
		t.Errorf("rewrote the shared kernel driver from inside a sandbox: %s", out)
	}
	if b, err := os.ReadFile(filepath.Join(rt.Home(), "kernels", "mcpbox_kernel.py")); err != nil || strings.HasPrefix(string(b), "import os") {
		t.Errorf("the host's kernel driver after the attempt: %v %.40q", err, b)
	}
	// Writes elsewhere land in the sandbox's own upper dir, not the host.
	mustSh(t, c, "mkdir -p /home/user/.local && echo x > /home/user/.local/"+name)
	if _, err := os.Stat("/home/user/.local/" + name); err == nil {
		t.Errorf("write to $HOME reached the host")
	}
}

func TestContainFileAPIEscapes(t *testing.T) {
	rt := newRuntime(t)
	marker := "hostsecret" + testutil.ID()
	secretFile := filepath.Join(os.TempDir(), marker)
	if err := os.WriteFile(secretFile, []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secretFile) })
	_, c := newTinySandbox(t, rt)
	mustSh(t, c, "ln -s "+secretFile+" /workspace/link; ln -s /proc/1/root/../../.. /workspace/up; ln -s ../../../../../../.. /workspace/rel")
	ctx := context.Background()
	for _, p := range []string{
		secretFile,
		"../../../../../../../.." + secretFile,
		"/workspace/link",
		"/workspace/up" + secretFile,
		"/workspace/rel" + secretFile,
		"/proc/1/root" + secretFile,
	} {
		rc, err := c.Download(ctx, p)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if bytes.Contains(b, []byte(marker)) {
				t.Errorf("download %q returned the host's secret", p)
			}
		}
	}
	escape := filepath.Join(os.TempDir(), "escape"+testutil.ID())
	for _, p := range []string{"../../../../../../.." + escape, escape, "/workspace/rel" + escape} {
		c.Upload(ctx, p, strings.NewReader("pwned"))
		if _, err := os.Stat(escape); err == nil {
			os.Remove(escape)
			t.Errorf("upload to %q wrote on the host", p)
		}
	}
}

func TestContainNetworkEgress(t *testing.T) {
	rt := newRuntime(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			conn.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	_, c := newTinySandbox(t, rt)
	out, code := mustSh(t, c, fmt.Sprintf(`python3 -c '
import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=2)
    print("CONNECTED")
except OSError as e:
    print("refused:", e)
'; cat /proc/net/dev`, port))
	if code != 0 || strings.Contains(out, "CONNECTED") || !strings.Contains(out, "refused") {
		t.Errorf("sandbox reached the host's loopback:\n%s", out)
	}
	select {
	case <-accepted:
		t.Errorf("host listener accepted a connection from the sandbox")
	default:
	}
	var ifaces []string
	for _, l := range strings.Split(out, "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") && !strings.HasPrefix(l, "refused") {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("interfaces in the sandbox = %q, want only lo", ifaces)
	}
}

// TestContainSyscalls tries what the seccomp filter and the missing
// capabilities must refuse, from Python's ctypes.
func TestContainSyscalls(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	out, code := mustSh(t, c, `python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print(name, "OK" if r >= 0 else os.strerror(e))
call("ptrace", 101, 0, 0, 0, 0)            # PTRACE_TRACEME
call("mount", 165, 0, 0, 0, 0, 0)
call("unshare-user", 272, 0x10000000)
call("unshare-ns", 272, 0x00020000)
call("setns", 308, 0, 0)
call("keyctl", 250, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("io_uring_setup", 425, 1, 0)
call("userfaultfd", 323, 0)
call("kexec_load", 246, 0, 0, 0, 0)
call("init_module", 175, 0, 0, 0)
try:
    os.mknod("/tmp/sda", 0o600 | 0o060000, os.makedev(8, 0))
    print("mknod OK")
except OSError as e:
    print("mknod", e.strerror)
PY
unshare -U true 2>&1 && echo "unshare-cmd OK"; true`)
	if code != 0 {
		t.Fatalf("probe failed:\n%s", out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasSuffix(l, " OK") {
			t.Errorf("allowed in the sandbox: %s", l)
		}
	}
	if n := strings.Count(out, "Operation not permitted"); n < 12 {
		t.Errorf("want every probe refused with EPERM, got %d:\n%s", n, out)
	}
}

func TestContainSignalHost(t *testing.T) {
	rt := newRuntime(t)
	victim := exec.Command("/bin/sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Process.Kill()
	_, c := newTinySandbox(t, rt)
	pid := victim.Process.Pid
	out, _ := mustSh(t, c, fmt.Sprintf("kill -9 %d 2>&1; kill -9 -1 2>&1; echo done", pid))
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("host process killed from the sandbox (%s): %v", out, err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("kill -1 as the sandbox user took the agent down: %v", err)
	}
}

func TestContainOtherSandbox(t *testing.T) {
	rt := newRuntime(t)
	_, a := newTinySandbox(t, rt)
	_, b := newTinySandbox(t, rt)
	marker := "secret" + testutil.ID()
	mustSh(t, a, "echo "+marker+" > /workspace/"+marker+"; echo "+marker+" > /tmp/"+marker)
	out, res, err := sh(t, a, 30*time.Second, "bash -c 'exec -a "+marker+" sleep 300' >/dev/null 2>&1 &")
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start sleeper: %v %s", err, out)
	}
	// The pattern matches the marker without being it, so b's own grep
	// does not show up in what b can see.
	pattern := marker[:1] + "[" + marker[1:2] + "]" + marker[2:]
	out, _ = mustSh(t, b, "ls -a /workspace /tmp; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; grep -rs '"+pattern+"' / --exclude-dir=proc --exclude-dir=usr --exclude-dir=dev")
	if strings.Contains(out, marker) {
		t.Errorf("sandbox b sees sandbox a's files or processes:\n%s", out)
	}
}

func TestContainDaemonGoneAfterDestroy(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny})
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.ForSandbox(rt, sb.ID)
	marker := "daemon" + testutil.ID()
	mustSh(t, c, "setsid bash -c 'exec -a "+marker+" sleep 300' </dev/null >/dev/null 2>&1 &")
	c.Close()
	if !hostProcessWith(marker) {
		t.Fatal("daemon did not start")
	}
	if err := rt.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if hostProcessWith(marker) {
		t.Errorf("daemon %s survived destroy", marker)
	}
	assertGone(t, rt, sb)
}

func TestDestroyAfterAgentSIGKILL(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny})
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.ForSandbox(rt, sb.ID)
	marker := "orphan" + testutil.ID()
	mustSh(t, c, "bash -c 'exec -a "+marker+" sleep 300' >/dev/null 2>&1 &")
	c.Close()
	if !hostProcessWith(marker) {
		t.Fatal("sleeper did not start")
	}
	if err := syscall.Kill(rt.PID(sb.ID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := rt.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if hostProcessWith(marker) {
		t.Errorf("process %s survived its agent's SIGKILL and destroy", marker)
	}
	assertGone(t, rt, sb)
}

// hostProcessWith reports whether a live (not zombie) host process's
// command line contains marker, waiting up to 2s for the answer to be yes.
func hostProcessWith(marker string) bool {
	deadline := time.Now().Add(2 * time.Second)
	for {
		matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil || !bytes.Contains(b, []byte(marker)) {
				continue
			}
			if st, _ := os.ReadFile(filepath.Join(filepath.Dir(m), "stat")); !bytes.Contains(st, []byte(") Z ")) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
