// Package seccomp installs the syscall filter every sandbox runs under.
//
// The sandbox's PID 1 calls [Install] once it has finished its own setup
// (mounts, pivot_root) and before it starts any user process. From then on
// every thread of PID 1 and every process it starts is filtered, and
// no_new_privs keeps a setuid binary from shedding the filter.
//
// The policy allows by default and denies what a sandbox never needs and
// what has a history of kernel escapes: namespaces, mounts, ptrace and its
// relatives, keyrings, BPF, modules, kexec, io_uring, userfaultfd,
// perf_event_open and host-global clocks, swap and accounting. Denied calls
// fail with EPERM, so programs see the same answer an unprivileged user
// gets. Three calls are special: clone is denied only when it asks for a
// new namespace; socket and socketpair only for families outside
// [allowedSocketFamilies] (AF_VSOCK, for one, is not namespaced and reaches
// the hypervisor); and clone3 fails with ENOSYS, because its flags live in
// memory the filter cannot read and ENOSYS makes glibc fall back to clone.
//
// The filter is written for x86_64. A syscall made through another ABI (the
// i386 int 0x80 gate or the x32 bit) would reach different syscall numbers,
// so i386 calls kill the process and x32 calls fail with ENOSYS.
package seccomp

import "slices"

// denied are the syscalls that always fail with EPERM.
var denied = []string{
	// Namespaces and mounts: the sandbox's shape is fixed before Install.
	"unshare", "setns",
	"mount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// Reading or writing another process: ptrace and what has its power.
	// kcmp compares kernel objects across processes (Docker gates it on
	// CAP_SYS_PTRACE too).
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise", "kcmp",
	// Kernel keyrings are not namespaced.
	"keyctl", "add_key", "request_key",
	// Large attack surfaces with a record of escapes.
	"bpf", "userfaultfd", "perf_event_open",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Loading code into the kernel or replacing it.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	// Host-global state: swap, power, the kernel log, accounting, clocks.
	"swapon", "swapoff", "reboot", "syslog", "acct",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	// File handles bypass path lookup and so the sandbox's root.
	"open_by_handle_at", "name_to_handle_at",
	// Obsolete or host-level interfaces nothing in a sandbox needs.
	"lookup_dcookie", "quotactl", "quotactl_fd", "fanotify_init",
	"vhangup", "iopl", "ioperm", "uselib",
}

// The calls denied only in part, or outside the table go-seccomp-bpf knows.
const (
	// clone is denied when its flags ask for a new namespace.
	cloneName = "clone"
	// personality is allowed only for the values that change nothing
	// dangerous (see allowedPersonas).
	personalityName = "personality"
	// socket and socketpair are denied for families outside
	// allowedSocketFamilies.
	socketName, socketpairName = "socket", "socketpair"
	// clone3 fails with ENOSYS: its flags are behind a pointer.
	clone3Name = "clone3"
	// open_tree_attr (Linux 6.15) is open_tree with mount attributes; the
	// library's syscall table predates it, so the filter names its number.
	openTreeAttrName = "open_tree_attr"
)

// allowedPersonas are the personality(2) arguments a sandbox may pass:
// PER_LINUX, PER_LINUX32 (what setarch/linux32 set; on x86_64 it only
// changes uname's machine) and 0xffffffff, which queries without setting.
// Everything else, such as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC, weakens
// the process's own defences and is denied.
var allowedPersonas = []uint64{0x0, 0x8, 0xffffffff}

// allowedSocketFamilies are the address families a sandbox may open
// sockets in: AF_UNIX (1), AF_INET (2), AF_INET6 (10) on its own loopback,
// and AF_NETLINK (16) for ip(8) and getifaddrs(3). The values are the same
// on every Linux architecture. Everything else fails with EPERM, as
// AF_VSOCK does under Docker's default profile: AF_VSOCK talks to the
// hypervisor past every namespace, AF_PACKET, AF_XDP and AF_ALG are large
// attack surfaces, and Bluetooth, CAN, TIPC, RDS and the rest have no use in
// a sandbox with no devices and only lo.
var allowedSocketFamilies = []uint32{1, 2, 10, 16}

// Denied returns the names of the syscalls the sandbox policy denies,
// sorted, for `mcpbox doctor` and the docs. clone is in the list although
// it is denied only with namespace flags, socket and socketpair although
// four families pass, personality although queries pass, and clone3
// although it fails with ENOSYS rather than EPERM.
func Denied() []string {
	names := append(slices.Clone(denied), cloneName, personalityName, clone3Name, openTreeAttrName,
		socketName, socketpairName)
	slices.Sort(names)
	return names
}
