package local

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestZombieNotRunning: an agent that died with nobody reaping it (its
// mcpbox process was killed, and the host's init leaves zombies) is not
// running, though its pid and start time still read back: otherwise its
// session would never be found dead.
func TestZombieNotRunning(t *testing.T) {
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Wait()
	start, err := procStartTime(p.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Not waited for: it stays a zombie once it exits.
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not become a zombie")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, err := procStartTime(p.Pid); err != nil || got != start {
		t.Fatalf("the zombie's start time reads %d, %v", got, err)
	}
	if running(p.Pid, start) {
		t.Error("a zombie agent counts as running")
	}
}
