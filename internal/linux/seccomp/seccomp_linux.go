//go:build linux && amd64

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// cloneNamespaceFlags are the clone(2) flags that create a namespace.
// CLONE_NEWTIME is missing on purpose: in clone(2) its bit (0x80) is part
// of the exit signal, so clone cannot make a time namespace at all; only
// unshare and clone3 can, and both are denied.
const cloneNamespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP

// x32SyscallBit marks a syscall made through the x32 ABI.
const x32SyscallBit = 0x40000000

// seccomp_data offsets (include/uapi/linux/seccomp.h).
const (
	offsetNr   = 0
	offsetArch = 4
	// offsetArg0Lo is the low word of args[0] on a little-endian machine.
	offsetArg0Lo = 16
)

const (
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
)

// Install sets no_new_privs and installs the sandbox policy on every thread
// of the calling process (SECCOMP_FILTER_FLAG_TSYNC), so every process
// started afterwards inherits it. It cannot be undone. After Install, do not
// start processes with syscall.SysProcAttr.UseCgroupFD: that makes Go use
// clone3, which the policy answers with ENOSYS.
func Install() error {
	raw, err := program()
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}

	// no_new_privs is per thread and the filter is installed from the
	// calling thread, so both must happen on the same one; TSYNC then copies
	// the filter and no_new_privs to the other threads. go-seccomp-bpf's
	// LoadFilter does not pin the thread, which is one reason we call
	// seccomp(2) ourselves.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	tid, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if tid != 0 {
		// TSYNC without TSYNC_ESRCH reports the first thread it could not
		// synchronise (it already runs a diverging filter).
		return fmt.Errorf("seccomp: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread %d cannot be synchronised", tid)
	}
	return nil
}

// Supported reports whether this kernel can run the policy: seccomp filter
// mode with TSYNC and the kill-process action. It changes nothing.
func Supported() error {
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("seccomp: prctl(PR_GET_SECCOMP): %w (kernel built without CONFIG_SECCOMP?)", err)
	}
	if mode == unix.SECCOMP_MODE_STRICT {
		return errors.New("seccomp: the process runs in strict mode")
	}
	// A NULL program makes the kernel fail at copying it in, after it has
	// checked the mode and flags: EFAULT means filter mode and TSYNC exist;
	// EINVAL means one of them does not.
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, 0)
	switch errno {
	case unix.EFAULT:
	case unix.EINVAL:
		return errors.New("seccomp: filter mode with TSYNC is not available (CONFIG_SECCOMP_FILTER, Linux 3.17+)")
	default:
		return fmt.Errorf("seccomp: probe seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	action := uint32(unix.SECCOMP_RET_KILL_PROCESS)
	_, _, errno = unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if errno != 0 {
		return fmt.Errorf("seccomp: action kill_process is not available (Linux 4.14+): %w", errno)
	}
	return nil
}

// program assembles the filter: our guard followed by the policy
// go-seccomp-bpf assembles.
func program() ([]bpf.RawInstruction, error) {
	policy, err := policy().Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble policy: %w", err)
	}
	raw, err := bpf.Assemble(append(guard(), policy...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble filter: %w", err)
	}
	return raw, nil
}

// policy is the part of the filter go-seccomp-bpf expresses: a table of
// names, with argument conditions for clone and personality.
func policy() *seccompbpf.Policy {
	personality := seccompbpf.ArgumentConditions{}
	for _, v := range allowedPersonas {
		personality = append(personality, seccompbpf.Condition{Argument: 0, Operation: seccompbpf.NotEqual, Value: v})
	}
	return &seccompbpf.Policy{
		DefaultAction: seccompbpf.ActionAllow,
		Syscalls: []seccompbpf.SyscallGroup{{
			Action: seccompbpf.ActionErrno, // always EPERM in this library
			Names:  denied,
			NamesWithCondtions: []seccompbpf.NameWithConditions{
				// On x86_64 the flags are clone's first argument.
				{Name: cloneName, Conditions: seccompbpf.ArgumentConditions{
					{Argument: 0, Operation: seccompbpf.BitsSet, Value: cloneNamespaceFlags},
				}},
				// All conditions must hold: the value is none of the allowed.
				{Name: personalityName, Conditions: personality},
			},
		}},
	}
}

// guard runs before the library's program and does what the library cannot:
//
//   - It kills the process on a foreign architecture. The library sends a
//     foreign architecture to the policy's default action, which for an
//     allow-by-default policy lets every i386 syscall (int 0x80) through.
//   - It answers clone3 with ENOSYS: the library's errno action is always
//     EPERM, and EPERM would not make glibc fall back to clone.
//   - It denies syscalls missing from the library's table by number.
//   - It restricts the socket families (see socketFamilies).
//
// x32 calls (nr with bit 30 set) get ENOSYS, as on a kernel without x32;
// the library checks the same, but only after its own arch test, so the
// guard keeps the whole ABI story in one place.
func guard() []bpf.Instruction {
	abi := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offsetArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_X86_64, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
		bpf.LoadAbsolute{Off: offsetNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_OPEN_TREE_ATTR, SkipTrue: 2},
		bpf.Jump{Skip: 2},
		bpf.RetConstant{Val: retENOSYS},
		bpf.RetConstant{Val: retEPERM},
	}
	// The library's program follows and starts by reloading the arch.
	return append(abi, socketFamilies()...)
}

// socketFamilies denies socket and socketpair outside
// allowedSocketFamilies; the syscall number is in A on entry and every
// other call falls through. It compares the low word of the family only:
// the kernel reads an int, and the library's conditions compare all 64
// bits, so junk in the high word would deny an allowed family there.
func socketFamilies() []bpf.Instruction {
	n := len(allowedSocketFamilies)
	insts := []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKET, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_SOCKETPAIR, SkipTrue: uint8(n + 2)},
		bpf.LoadAbsolute{Off: offsetArg0Lo, Size: 4},
	}
	for i, family := range allowedSocketFamilies {
		// A match skips the remaining comparisons and the return.
		insts = append(insts, bpf.JumpIf{Cond: bpf.JumpEqual, Val: family, SkipTrue: uint8(n - i)})
	}
	return append(insts, bpf.RetConstant{Val: retEPERM})
}
