//go:build linux && amd64

package seccomp

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary run probeFiltered instead of the tests:
// Install cannot be undone, so it runs in a child process.
const (
	helperEnv = "MCPBOX_SECCOMP_TEST_HELPER"
	i386Env   = "MCPBOX_SECCOMP_TEST_I386"
)

// personality(2) flags (include/uapi/linux/personality.h); x/sys lacks them.
const (
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(probeFiltered())
	}
	os.Exit(m.Run())
}

func TestDenied(t *testing.T) {
	got := Denied()
	if !slices.IsSorted(got) {
		t.Errorf("Denied() is not sorted: %v", got)
	}
	if c := slices.Compact(slices.Clone(got)); len(c) != len(got) {
		t.Errorf("Denied() has duplicates: %v", got)
	}
	for _, name := range []string{"ptrace", "mount", "unshare", "setns", "keyctl", "bpf", "clone", "clone3", "io_uring_setup", "personality",
		"socket", "socketpair", "kcmp", "userfaultfd", "perf_event_open", "kexec_load", "finit_module", "open_by_handle_at"} {
		if !slices.Contains(got, name) {
			t.Errorf("Denied() lacks %s", name)
		}
	}
	got[0] = "changed"
	if Denied()[0] == "changed" {
		t.Error("Denied() returns shared state")
	}
}

func TestSupported(t *testing.T) {
	if err := Supported(); err != nil {
		t.Fatalf("Supported() = %v on a kernel that has seccomp filters", err)
	}
}

// TestProgram runs the assembled filter in a BPF interpreter on crafted
// seccomp_data, covering the cases a live process cannot easily make, such
// as a foreign architecture.
func TestProgram(t *testing.T) {
	raw, err := program()
	if err != nil {
		t.Fatal(err)
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatalf("filter rejected by the BPF interpreter: %v", err)
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		kill  = unix.SECCOMP_RET_KILL_PROCESS
	)
	type call struct {
		name string
		arch uint32
		nr   uint32
		args [6]uint64
		want uint32
	}
	x86 := uint32(unix.AUDIT_ARCH_X86_64)
	tests := []call{
		{name: "read", arch: x86, nr: unix.SYS_READ, want: allow},
		{name: "getpid", arch: x86, nr: unix.SYS_GETPID, want: allow},
		{name: "execve", arch: x86, nr: unix.SYS_EXECVE, want: allow},
		{name: "clone fork", arch: x86, nr: unix.SYS_CLONE, args: [6]uint64{uint64(unix.SIGCHLD)}, want: allow},
		{name: "clone thread", arch: x86, nr: unix.SYS_CLONE, args: [6]uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES |
			unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS}, want: allow},
		{name: "clone vfork pidfd", arch: x86, nr: unix.SYS_CLONE, args: [6]uint64{unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD}, want: allow},
		// The kernel ignores clone's upper 32 flag bits; so does the filter.
		{name: "clone high bits", arch: x86, nr: unix.SYS_CLONE, args: [6]uint64{0xffffffff_00000000 | uint64(unix.SIGCHLD)}, want: allow},
		{name: "clone3", arch: x86, nr: unix.SYS_CLONE3, want: retENOSYS},
		{name: "personality query", arch: x86, nr: unix.SYS_PERSONALITY, args: [6]uint64{0xffffffff}, want: allow},
		{name: "personality PER_LINUX", arch: x86, nr: unix.SYS_PERSONALITY, args: [6]uint64{0}, want: allow},
		{name: "personality PER_LINUX32", arch: x86, nr: unix.SYS_PERSONALITY, args: [6]uint64{8}, want: allow},
		{name: "personality ADDR_NO_RANDOMIZE", arch: x86, nr: unix.SYS_PERSONALITY, args: [6]uint64{addrNoRandomize}, want: retEPERM},
		{name: "personality READ_IMPLIES_EXEC", arch: x86, nr: unix.SYS_PERSONALITY, args: [6]uint64{readImpliesExec}, want: retEPERM},
		{name: "personality 64-bit -1", arch: x86, nr: unix.SYS_PERSONALITY, args: [6]uint64{^uint64(0)}, want: retEPERM},
		{name: "x32 read", arch: x86, nr: x32SyscallBit | unix.SYS_READ, want: retENOSYS},
		{name: "x32 unshare", arch: x86, nr: x32SyscallBit | unix.SYS_UNSHARE, want: retENOSYS},
		{name: "nr -1", arch: x86, nr: 0xffffffff, want: retENOSYS},
		{name: "i386 getpid", arch: unix.AUDIT_ARCH_I386, nr: 20, want: kill},
		{name: "i386 read", arch: unix.AUDIT_ARCH_I386, nr: 3, want: kill},
		{name: "aarch64 read", arch: unix.AUDIT_ARCH_AARCH64, nr: 63, want: kill},
	}
	for _, fam := range []struct {
		name   string
		family uint64
		want   uint32
	}{
		{"AF_UNIX", unix.AF_UNIX, allow},
		{"AF_INET", unix.AF_INET, allow},
		{"AF_INET6", unix.AF_INET6, allow},
		{"AF_NETLINK", unix.AF_NETLINK, allow},
		{"AF_UNSPEC", unix.AF_UNSPEC, retEPERM},
		{"AF_VSOCK", unix.AF_VSOCK, retEPERM},
		{"AF_PACKET", unix.AF_PACKET, retEPERM},
		{"AF_KEY", unix.AF_KEY, retEPERM},
		{"AF_BLUETOOTH", unix.AF_BLUETOOTH, retEPERM},
		{"AF_ALG", unix.AF_ALG, retEPERM},
		{"AF_XDP", unix.AF_XDP, retEPERM},
		{"AF_TIPC", unix.AF_TIPC, retEPERM},
		{"AF_RDS", unix.AF_RDS, retEPERM},
		{"AF_CAN", unix.AF_CAN, retEPERM},
		{"AF_MAX", unix.AF_MAX, retEPERM},
		// The kernel reads the family as an int, so the filter looks only
		// at the low word: junk above it neither smuggles a family in nor
		// denies an allowed one.
		{"AF_UNIX high bits", 0xdead0000_00000000 | unix.AF_UNIX, allow},
		{"AF_VSOCK high bits", 0x00000001_00000000 | unix.AF_VSOCK, retEPERM},
		{"AF_INET in high word", uint64(unix.AF_INET) << 32, retEPERM},
	} {
		tests = append(tests,
			call{name: "socket " + fam.name, arch: x86, nr: unix.SYS_SOCKET, args: [6]uint64{fam.family, unix.SOCK_STREAM}, want: fam.want},
			call{name: "socketpair " + fam.name, arch: x86, nr: unix.SYS_SOCKETPAIR, args: [6]uint64{fam.family, unix.SOCK_STREAM}, want: fam.want})
	}
	// Neighbours of socket in the table are untouched by its check.
	tests = append(tests,
		call{name: "connect", arch: x86, nr: unix.SYS_CONNECT, args: [6]uint64{unix.AF_VSOCK}, want: allow},
		call{name: "bind", arch: x86, nr: unix.SYS_BIND, args: [6]uint64{unix.AF_PACKET}, want: allow})
	for _, flag := range []struct {
		name string
		bit  uint64
	}{
		{"NEWUSER", unix.CLONE_NEWUSER}, {"NEWNS", unix.CLONE_NEWNS}, {"NEWPID", unix.CLONE_NEWPID},
		{"NEWNET", unix.CLONE_NEWNET}, {"NEWUTS", unix.CLONE_NEWUTS}, {"NEWIPC", unix.CLONE_NEWIPC},
		{"NEWCGROUP", unix.CLONE_NEWCGROUP},
	} {
		tests = append(tests, call{name: "clone CLONE_" + flag.name, arch: x86, nr: unix.SYS_CLONE,
			args: [6]uint64{flag.bit | uint64(unix.SIGCHLD)}, want: retEPERM})
	}
	for _, name := range denied {
		nr, ok := sysnum[name]
		if !ok {
			t.Fatalf("test table lacks the number of %s", name)
		}
		tests = append(tests, call{name: name, arch: x86, nr: nr, want: retEPERM})
	}
	tests = append(tests, call{name: "open_tree_attr", arch: x86, nr: unix.SYS_OPEN_TREE_ATTR, want: retEPERM})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := vm.Run(seccompData(tt.arch, tt.nr, tt.args))
			if err != nil {
				t.Fatal(err)
			}
			if uint32(got) != tt.want {
				t.Errorf("filter returned %#x, want %#x", uint32(got), tt.want)
			}
		})
	}
}

// seccompData lays out struct seccomp_data for the BPF interpreter. The
// kernel loads 32-bit words in host order while the interpreter reads them
// big-endian, so every word is written big-endian at its offset.
func seccompData(arch, nr uint32, args [6]uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))       // low word first on x86_64
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32)) // then the high word
	}
	return b
}

// sysnum maps the names in denied to their x86_64 numbers, independently of
// the library's table.
var sysnum = map[string]uint32{
	"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "mount": unix.SYS_MOUNT,
	"umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT,
	"move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE, "fsopen": unix.SYS_FSOPEN,
	"fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
	"mount_setattr": unix.SYS_MOUNT_SETATTR, "ptrace": unix.SYS_PTRACE,
	"process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
	"pidfd_getfd": unix.SYS_PIDFD_GETFD, "process_madvise": unix.SYS_PROCESS_MADVISE, "kcmp": unix.SYS_KCMP,
	"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
	"bpf": unix.SYS_BPF, "userfaultfd": unix.SYS_USERFAULTFD, "perf_event_open": unix.SYS_PERF_EVENT_OPEN,
	"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
	"io_uring_register": unix.SYS_IO_URING_REGISTER, "kexec_load": unix.SYS_KEXEC_LOAD,
	"kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "init_module": unix.SYS_INIT_MODULE,
	"finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
	"swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT,
	"syslog": unix.SYS_SYSLOG, "acct": unix.SYS_ACCT, "settimeofday": unix.SYS_SETTIMEOFDAY,
	"clock_settime": unix.SYS_CLOCK_SETTIME, "clock_adjtime": unix.SYS_CLOCK_ADJTIME,
	"adjtimex": unix.SYS_ADJTIMEX, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE,
	"quotactl": unix.SYS_QUOTACTL, "quotactl_fd": unix.SYS_QUOTACTL_FD,
	"fanotify_init": unix.SYS_FANOTIFY_INIT, "vhangup": unix.SYS_VHANGUP, "iopl": unix.SYS_IOPL,
	"ioperm": unix.SYS_IOPERM, "uselib": unix.SYS_USELIB,
}

// TestInstall installs the filter in a child (the test binary in helper
// mode), which tries denied and ordinary operations and reports each
// outcome. Every denied probe is chosen so that, unfiltered, it fails with
// a different errno or does no harm: the test tells the filter's answer
// from the kernel's. No root is needed: no_new_privs allows the filter.
func TestInstall(t *testing.T) {
	i386 := i386Binary(t)
	results := runFiltered(t, i386)

	tests := []struct {
		probe string
		want  string
	}{
		{"unshare(CLONE_NEWUSER)", "EPERM"},
		{"unshare(CLONE_NEWNS)", "EPERM"},
		{"setns", "EPERM"},
		{"ptrace(PTRACE_TRACEME)", "EPERM"},
		{"keyctl", "EPERM"},
		{"add_key", "EPERM"},
		{"bpf", "EPERM"},
		{"mount", "EPERM"},
		{"umount2", "EPERM"},
		{"chroot", "EPERM"},
		{"io_uring_setup", "EPERM"},
		{"perf_event_open", "EPERM"},
		{"open_tree_attr", "EPERM"},
		{"clone(CLONE_NEWNS)", "EPERM"},
		{"clone(CLONE_NEWUSER)", "EPERM"},
		{"clone(CLONE_NEWPID)", "EPERM"},
		{"clone(CLONE_NEWNET)", "EPERM"},
		{"clone(CLONE_NEWUTS)", "EPERM"},
		{"clone(CLONE_NEWIPC)", "EPERM"},
		{"clone(CLONE_NEWCGROUP)", "EPERM"},
		{"clone3", "ENOSYS"},
		{"request_key", "EPERM"},
		{"userfaultfd", "EPERM"},
		{"io_uring_enter", "EPERM"},
		{"io_uring_register", "EPERM"},
		{"kexec_load", "EPERM"},
		{"kexec_file_load", "EPERM"},
		{"init_module", "EPERM"},
		{"finit_module", "EPERM"},
		{"delete_module", "EPERM"},
		{"open_by_handle_at", "EPERM"},
		{"name_to_handle_at", "EPERM"},
		{"process_vm_readv", "EPERM"},
		{"process_vm_writev", "EPERM"},
		{"kcmp", "EPERM"},
		{"pivot_root", "EPERM"},
		{"socket(AF_UNIX)", "ok"},
		{"socket(AF_INET)", "ok"},
		{"socket(AF_INET6)", "ok"},
		{"socket(AF_NETLINK)", "ok"},
		{"socket(AF_VSOCK)", "EPERM"},
		{"socket(AF_PACKET)", "EPERM"},
		{"socket(AF_KEY)", "EPERM"},
		{"socket(AF_ALG)", "EPERM"},
		{"socket(AF_BLUETOOTH)", "EPERM"},
		{"socketpair(AF_UNIX)", "ok"},
		{"socketpair(AF_VSOCK)", "EPERM"},
		{"x32 unshare", "ENOSYS"},
		{"personality(ADDR_NO_RANDOMIZE)", "EPERM"},
		{"personality(query)", "ok"},
		{"getpid", "ok"},
		{"write file", "ok"},
		{"every thread filtered", "ok"},
		{"exec /bin/true", "ok"},
		{"exec unshare -U true", "fails with Operation not permitted"},
		{"i386 int 0x80", "signal: bad system call"},
	}
	for _, tt := range tests {
		t.Run(tt.probe, func(t *testing.T) {
			got, ok := results[tt.probe]
			if !ok {
				t.Fatalf("helper did not report %q", tt.probe)
			}
			if got == "skip" {
				t.Skip("skipped: not possible on this host (see the helper's reason above)")
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// runFiltered runs the test binary in helper mode and decodes its report.
func runFiltered(t *testing.T, i386 string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", i386Env+"="+i386)
	cmd.Dir = t.TempDir() // the helper writes a file in its working directory
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("helper stderr:\n%s", stderr.String())
	}
	var results map[string]string
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return results
}

// probeFiltered is the helper: it installs the filter, tries each probe and
// prints a JSON object probe → "ok", an errno name or what happened.
func probeFiltered() int {
	if err := Install(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	results := map[string]string{}
	raw := func(name string, trap uintptr, args ...uintptr) {
		var a [6]uintptr
		copy(a[:], args)
		_, _, errno := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
		results[name] = errnoString(errno)
	}
	nowhere := cstr("/nonexistent-mcpbox-seccomp-test")
	// unshare(CLONE_NEWUSER) is EINVAL unfiltered: Go is multithreaded.
	raw("unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	raw("unshare(CLONE_NEWNS)", unix.SYS_UNSHARE, unix.CLONE_NEWNS)
	raw("setns", unix.SYS_SETNS, ^uintptr(0), 0) // EBADF unfiltered
	raw("keyctl", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(0) /* KEY_SPEC_THREAD_KEYRING */, 0)
	raw("add_key", unix.SYS_ADD_KEY, 0, 0, 0, 0, 0) // EFAULT unfiltered
	raw("bpf", unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0)
	raw("mount", unix.SYS_MOUNT, nowhere, nowhere, nowhere, 0, 0) // ENOENT unfiltered
	raw("umount2", unix.SYS_UMOUNT2, nowhere, 0)
	raw("chroot", unix.SYS_CHROOT, nowhere)
	raw("io_uring_setup", unix.SYS_IO_URING_SETUP, 0, 0)
	raw("perf_event_open", unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	raw("open_tree_attr", unix.SYS_OPEN_TREE_ATTR, ^uintptr(0), 0, 0, 0, 0)
	// The kernel refuses a new mount namespace or user namespace that
	// shares fs info (CLONE_FS) with EINVAL, so unfiltered these do not fork.
	raw("clone(CLONE_NEWNS)", unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_FS, 0, 0, 0, 0)
	raw("clone(CLONE_NEWUSER)", unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS, 0, 0, 0, 0)
	// CLONE_THREAD without CLONE_SIGHAND is EINVAL before any namespace
	// is made, so unfiltered these do not fork either.
	for _, ns := range []struct {
		name string
		flag uintptr
	}{
		{"NEWPID", unix.CLONE_NEWPID}, {"NEWNET", unix.CLONE_NEWNET}, {"NEWUTS", unix.CLONE_NEWUTS},
		{"NEWIPC", unix.CLONE_NEWIPC}, {"NEWCGROUP", unix.CLONE_NEWCGROUP},
	} {
		raw("clone(CLONE_"+ns.name+")", unix.SYS_CLONE, ns.flag|unix.CLONE_THREAD, 0, 0, 0, 0)
	}
	raw("clone3", unix.SYS_CLONE3, 0, 0) // EINVAL unfiltered: size 0
	probeGaps(raw)
	probeSockets(results)
	raw("x32 unshare", x32SyscallBit|unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	raw("personality(ADDR_NO_RANDOMIZE)", unix.SYS_PERSONALITY, addrNoRandomize)
	raw("personality(query)", unix.SYS_PERSONALITY, 0xffffffff)
	raw("getpid", unix.SYS_GETPID)

	results["write file"] = outcome(os.WriteFile("probe", []byte("x"), 0o600))
	results["every thread filtered"] = threadsFiltered()
	results["exec /bin/true"] = outcome(exec.Command("/bin/true").Run())
	results["exec unshare -U true"] = execUnshare()
	results["i386 int 0x80"] = "skip"
	if p := os.Getenv(i386Env); p != "" {
		results["i386 int 0x80"] = outcome(exec.Command(p).Run())
	}
	// Last: unfiltered, PTRACE_TRACEME would make the helper a tracee that
	// stops at its next exec, waiting for a tracer that never looks.
	raw("ptrace(PTRACE_TRACEME)", unix.SYS_PTRACE, unix.PTRACE_TRACEME)
	json.NewEncoder(os.Stdout).Encode(results)
	return 0
}

// probeGaps tries the denied calls that need root to tell the filter's
// EPERM from the kernel's: run as root, each fails unfiltered with another
// errno (a bad flag, fd or pointer) and changes nothing. TestProgram
// covers them without root.
func probeGaps(raw func(name string, trap uintptr, args ...uintptr)) {
	const badFlag = 0x8000 // no kexec, userfaultfd or process_vm flag has it
	self := uintptr(os.Getpid())
	root, cwd := cstr("/"), unix.AT_FDCWD
	raw("request_key", unix.SYS_REQUEST_KEY, 0, 0, 0, 0) // EFAULT
	raw("userfaultfd", unix.SYS_USERFAULTFD, 1 /* UFFD_USER_MODE_ONLY */ |badFlag)
	raw("io_uring_enter", unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0) // EBADF
	raw("io_uring_register", unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0)
	raw("kexec_load", unix.SYS_KEXEC_LOAD, 0, 0, 0, badFlag)
	raw("kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, badFlag)
	raw("init_module", unix.SYS_INIT_MODULE, 0, 0, 0)             // ENOEXEC: shorter than an ELF header
	raw("finit_module", unix.SYS_FINIT_MODULE, ^uintptr(0), 0, 0) // EBADF
	raw("delete_module", unix.SYS_DELETE_MODULE, 0, 0)            // EFAULT
	raw("open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0)
	raw("name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, uintptr(cwd), root, 0, 0, 0xffff0000)
	raw("process_vm_readv", unix.SYS_PROCESS_VM_READV, self, 0, 0, 0, 0, 1) // EINVAL: flags
	raw("process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, self, 0, 0, 0, 0, 1)
	raw("kcmp", unix.SYS_KCMP, self, self, 0 /* KCMP_FILE */, 0, 0) // 0 unfiltered: the same file
	nowhere := cstr("/nonexistent-mcpbox-seccomp-test")
	raw("pivot_root", unix.SYS_PIVOT_ROOT, nowhere, nowhere) // ENOENT
}

// probeSockets makes a socket of each family the sandbox may use and tries
// families it may not. Unfiltered (as root) the denied ones succeed or fail
// with EAFNOSUPPORT when their module is missing, never with EPERM.
func probeSockets(results map[string]string) {
	for _, p := range []struct {
		name            string
		family, typ, pr int
	}{
		{"AF_UNIX", unix.AF_UNIX, unix.SOCK_STREAM, 0},
		{"AF_INET", unix.AF_INET, unix.SOCK_DGRAM, 0},
		{"AF_INET6", unix.AF_INET6, unix.SOCK_DGRAM, 0},
		{"AF_NETLINK", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, // what ip(8) opens
		{"AF_VSOCK", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
		{"AF_PACKET", unix.AF_PACKET, unix.SOCK_RAW, 0},
		{"AF_KEY", unix.AF_KEY, unix.SOCK_RAW, 2 /* PF_KEY_V2 */},
		{"AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
		{"AF_BLUETOOTH", unix.AF_BLUETOOTH, unix.SOCK_RAW, 1 /* BTPROTO_HCI */},
	} {
		name := "socket(" + p.name + ")"
		fd, err := unix.Socket(p.family, p.typ|unix.SOCK_CLOEXEC, p.pr)
		if err == nil {
			unix.Close(fd)
		}
		results[name] = errnoString(errnoOf(err))
		if p.family == unix.AF_INET6 && errors.Is(err, unix.EAFNOSUPPORT) {
			os.Stderr.WriteString("IPv6 is disabled on this host: the AF_INET6 probe is skipped\n")
			results[name] = "skip"
		}
	}
	for _, p := range []struct {
		name   string
		family int
	}{{"AF_UNIX", unix.AF_UNIX}, {"AF_VSOCK", unix.AF_VSOCK}} {
		fds, err := unix.Socketpair(p.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		results["socketpair("+p.name+")"] = errnoString(errnoOf(err))
	}
}

// errnoOf is err's errno, 0 for nil.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	errors.As(err, &errno)
	return errno
}

func errnoString(errno syscall.Errno) string {
	if errno == 0 {
		return "ok"
	}
	return unix.ErrnoName(errno)
}

func outcome(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// threadsFiltered checks TSYNC: every thread, not only the caller, must run
// in filter mode with no_new_privs.
func threadsFiltered() string {
	status, _ := filepath.Glob("/proc/self/task/*/status")
	if len(status) < 2 {
		return "only one thread to check"
	}
	for _, p := range status {
		b, err := os.ReadFile(p)
		if err != nil {
			return err.Error()
		}
		if !bytes.Contains(b, []byte("\nSeccomp:\t2\n")) || !bytes.Contains(b, []byte("\nNoNewPrivs:\t1\n")) {
			return p + " is not filtered"
		}
	}
	return "ok"
}

func execUnshare() string {
	path, err := exec.LookPath("unshare")
	if err != nil {
		os.Stderr.WriteString("unshare(1) not found: " + err.Error() + "\n")
		return "skip"
	}
	out, err := exec.Command(path, "-U", "true").CombinedOutput()
	if err == nil {
		return "unshare -U succeeded"
	}
	if strings.Contains(string(out), "Operation not permitted") {
		return "fails with Operation not permitted"
	}
	return err.Error() + ": " + string(out)
}

func cstr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// i386Binary writes a tiny static x86_64 program that makes one i386
// syscall through int 0x80 (getpid) and then exits 0, and returns its path,
// or "" when this kernel runs no i386 syscalls (no IA32 emulation) and the
// bypass cannot exist. Under the filter it must die of SIGSYS.
func i386Binary(t *testing.T) string {
	t.Helper()
	const base = 0x400000
	code := []byte{
		0xb8, 0x14, 0x00, 0x00, 0x00, // mov eax, 20 (getpid on i386)
		0xcd, 0x80, // int 0x80
		0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60 (exit on x86_64)
		0x31, 0xff, // xor edi, edi
		0x0f, 0x05, // syscall
	}
	const hdrs = 64 + 56
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, elf.Header64{
		Ident:     [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(elf.EM_X86_64),
		Version:   uint32(elf.EV_CURRENT),
		Entry:     base + hdrs,
		Phoff:     64,
		Ehsize:    64,
		Phentsize: 56,
		Phnum:     1,
	})
	binary.Write(&b, binary.LittleEndian, elf.Prog64{
		Type:   uint32(elf.PT_LOAD),
		Flags:  uint32(elf.PF_R | elf.PF_X),
		Vaddr:  base,
		Paddr:  base,
		Filesz: hdrs + uint64(len(code)),
		Memsz:  hdrs + uint64(len(code)),
		Align:  0x1000,
	})
	b.Write(code)
	path := filepath.Join(t.TempDir(), "i386-getpid")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(path).Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Logf("no i386 syscalls on this kernel (%v): the int 0x80 probe is skipped", err)
			return ""
		}
		t.Fatalf("run %s unfiltered: %v", path, err)
	}
	return path
}
