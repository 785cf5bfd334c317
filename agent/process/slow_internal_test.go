package process

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/gen/processpb"
)

// TestSlowSubscriberGetsEverything attaches a subscriber that stops reading
// at its first output event, resumes only after the process has exited and
// the exit grace has passed, and then reads slowly, beside one that keeps
// up. The slow stream
// must still carry every line, then the end event, and the agent must not
// panic: it used to close a subscriber's channel while an output pump was
// still blocked sending on it.
func TestSlowSubscriberGetsEverything(t *testing.T) {
	s := New(&Options{
		Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()),
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"},
	})
	t.Cleanup(s.Close)
	const lines = 200 // far more output events than a subscriber buffers
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); echo $i; sleep 0.002; done", lines)
	p, sub, err := s.start(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sh", Args: []string{"-c", script}}}, user{})
	if err != nil {
		t.Fatal(err)
	}
	fast := p.subscribe()
	fastDone := make(chan *processpb.ProcessEvent_EndEvent, 1)
	go func() {
		var end *processpb.ProcessEvent_EndEvent
		s.follow(context.Background(), "", p, fast, func(ev *processpb.ProcessEvent) error {
			if e := ev.GetEnd(); e != nil {
				end = e
			}
			return nil
		})
		fastDone <- end
	}()
	var out strings.Builder
	var end *processpb.ProcessEvent_EndEvent
	stalled := false
	err = s.follow(context.Background(), "", p, sub, func(ev *processpb.ProcessEvent) error {
		if d := ev.GetData(); d != nil {
			if !stalled {
				stalled = true
				// Not an assertion: the stall must outlast the process
				// and the grace the agent gives its pipes.
				<-p.child.Done()
				time.Sleep(3 * exitGrace)
			}
			// And then it reads slowly, so the output pump runs while
			// the end event waits its turn.
			time.Sleep(time.Millisecond)
			out.Write(d.GetStdout())
		}
		if e := ev.GetEnd(); e != nil {
			end = e
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintln(&want, i)
	}
	if out.String() != want.String() {
		t.Errorf("slow subscriber got %d bytes of output, want %d", out.Len(), want.Len())
	}
	if end == nil || end.GetExitCode() != 0 || !end.GetExited() {
		t.Errorf("end = %v, want exit 0", end)
	}
	if end := <-fastDone; end == nil || end.GetExitCode() != 0 {
		t.Errorf("the subscriber that kept up got end %v, want exit 0", end)
	}
}
