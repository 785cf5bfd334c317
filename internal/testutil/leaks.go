package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CheckLeaks looks on the host for anything left of the sandboxes whose
// ids this process made with ID: a process in one of their cgroups, a
// cgroup directory, a mount, or a state directory under /tmp test homes.
// It returns one line per leak. Tests run it from TestMain after m.Run, so
// "nothing is left behind" is asserted, not assumed.
func CheckLeaks() []string {
	idsMu.Lock()
	mine := append([]string(nil), ids...)
	idsMu.Unlock()
	if len(mine) == 0 || os.Geteuid() != 0 {
		return nil
	}
	var leaks []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	homes, _ := filepath.Glob(filepath.Join(os.TempDir(), "mcpbox-test-*", "sessions"))
	for _, id := range mine {
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Contains(b, []byte("/"+id)) {
				continue
			}
			stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
			leaks = append(leaks, fmt.Sprintf("process %s of sandbox %s is alive: %s", filepath.Dir(p), id, strings.TrimSpace(string(stat))))
		}
		cg, _ := filepath.Glob("/sys/fs/cgroup/*/*/" + id)
		for _, d := range cg {
			leaks = append(leaks, "cgroup left behind: "+d)
		}
		if bytes.Contains(mountinfo, []byte(id)) {
			leaks = append(leaks, "mount of sandbox "+id+" left in the host's mount table")
		}
		for _, h := range homes {
			if _, err := os.Stat(filepath.Join(h, id)); err == nil {
				leaks = append(leaks, "state directory left behind: "+filepath.Join(h, id))
			}
		}
	}
	return leaks
}
