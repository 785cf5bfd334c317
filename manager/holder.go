package manager

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/mcpbox/mcpbox"
)

// defaultHolder names this process in the store: its host, pid and start
// time, and a random tail. A process on the same host can then tell at
// once that a holder died (its pid is gone, or is another process now)
// instead of waiting for its lease to run out — a restarted server
// re-adopts its sessions immediately.
func defaultHolder() string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	start, _ := procStart(pid)
	return fmt.Sprintf("%s/%d/%d/%s", host, pid, start, mcpbox.NewID()[:6])
}

// holderDead reports whether holder is sure to be a dead process on this
// host. Anything it cannot tell (another host, another naming) is not.
func holderDead(holder string) bool {
	parts := strings.Split(holder, "/")
	if len(parts) != 4 {
		return false
	}
	if host, _ := os.Hostname(); host != parts[0] {
		return false
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || start == 0 {
		return false
	}
	now, err := procStart(pid)
	return err != nil || now != start
}

// procStart reads a process's start time (field 22 of /proc/<pid>/stat,
// clock ticks since boot): a pid alone may have been reused.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}
