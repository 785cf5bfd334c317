package reaper

import (
	"fmt"
	"os"
	"strconv"
)

// ChildOOMScoreAdj is the oom_score_adj the agent gives the processes it
// starts unless told otherwise: the most killable, so that when a sandbox
// runs out of memory the kernel kills user code and not PID 1 (the host
// sets the agent's own score low).
const ChildOOMScoreAdj = 1000

// SetOOMScoreAdj writes score (-1000..1000) to the child's
// /proc/<pid>/oom_score_adj. Call it right after Start, for every child:
// a child inherits the agent's low score, and raising a score needs no
// privilege. It does nothing once the child has been reaped, when its pid
// may already be another's. The child runs at the inherited score until
// the write; whatever it forks before then keeps that score. That grants
// nothing: a child may lower its own score to the agent's anyway (the
// floor a privileged write sets is inherited). Closing the window would
// take a trampoline exec before every process, which costs milliseconds.
func SetOOMScoreAdj(c *Child, score int) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(c.Pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("oom_score_adj of pid %d: %w", c.Pid, err)
	}
	_, err = f.WriteString(strconv.Itoa(score))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("oom_score_adj of pid %d: %w", c.Pid, err)
	}
	return nil
}
