package process

import "syscall"

// pipeCapacity returns how many bytes the pipe fd can hold, or 0 if it
// cannot tell.
func pipeCapacity(fd uintptr) int {
	n, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETPIPE_SZ, 0)
	if errno != 0 {
		return 0
	}
	return int(n)
}
