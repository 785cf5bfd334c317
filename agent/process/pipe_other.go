//go:build !linux

package process

// pipeCapacity cannot ask the pipe's size outside Linux.
func pipeCapacity(uintptr) int { return 0 }
