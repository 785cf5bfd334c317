package kernel_test

import (
	"fmt"
	"strings"
	"testing"
)

// allText joins every string an event carries, so a test can count what
// the reply says.
func allText(evs []event) string {
	var b strings.Builder
	for _, ev := range evs {
		for _, v := range ev {
			if s, ok := v.(string); ok {
				b.WriteString(s + "\n")
			}
		}
	}
	return b.String()
}

// TestKernelExits checks that a kernel that exits or dies mid-cell is
// reported at once, with what it printed and its status; that the loss of
// state is said once; and that the next call gets a fresh kernel.
func TestKernelExits(t *testing.T) {
	probe := map[string]struct{ setup, check, fresh string }{
		"python":     {"kept = 1", "print('kept' in globals())", "False\n"},
		"javascript": {"var kept = 1", "console.log(typeof kept)", "undefined\n"},
		"shell":      {"kept=1", "echo ${kept:-gone}", "gone\n"},
	}
	for _, tc := range []struct {
		name, language, code string
		stdout, stderr       string
		error, status        string
	}{
		{"python sys.exit", "python", "print('before')\nimport sys\nsys.exit(7)", "before\n", "", "KernelExited", "exited with status 7"},
		{"python sys.exit with a message", "python", "import sys\nsys.exit('bad input')", "", "bad input\n", "KernelExited", "exited with status 1"},
		{"python os._exit after fd output", "python", "import os\nos.write(1, b'before\\n')\nos._exit(5)", "before\n", "", "KernelExited", "exited with status 5"},
		{"python killed by a signal", "python", "import os, signal\nprint('before')\nos.kill(os.getpid(), signal.SIGTERM)", "before\n", "", "KernelDied", "signal 15"},
		{"javascript process.exit", "javascript", "console.log('before'); process.exit(2)", "before\n", "", "KernelExited", "exited with status 2"},
		{"shell exit", "shell", "echo before; exit 3", "before\n", "", "KernelExited", "exited with status 3"},
		{"shell exit with a background job", "shell", "sleep 300 & echo before; exit 4", "before\n", "", "KernelExited", "exited with status 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := serve(t, 0)
			p := probe[tc.language]
			execute(t, url, map[string]any{"language": tc.language, "code": p.setup})
			// The timeout only detects a hang: the exit must end the cell.
			evs := execute(t, url, map[string]any{"language": tc.language, "code": tc.code, "timeout": 30})
			if got := text(evs, "stdout"); got != tc.stdout {
				t.Errorf("stdout %q, want %q", got, tc.stdout)
			}
			if got := text(evs, "stderr"); got != tc.stderr {
				t.Errorf("stderr %q, want %q", got, tc.stderr)
			}
			var errs []event
			for _, ev := range evs {
				if ev["type"] == "error" {
					errs = append(errs, ev)
				}
			}
			if len(errs) != 1 || errs[0]["name"] != tc.error || !strings.Contains(fmt.Sprint(errs[0]["value"]), tc.status) {
				t.Errorf("errors %v, want one %s saying %q", errs, tc.error, tc.status)
			}
			if n := strings.Count(allText(evs), "state is lost"); n != 1 {
				t.Errorf("the reply says %d times that the state is lost, want once: %v", n, evs)
			}
			if find(evs, "unexpected_end_of_execution") == nil {
				t.Errorf("no unexpected_end_of_execution: %v", evs)
			}
			if end := evs[len(evs)-1]; end["restarted"] != true || end["timed_out"] != nil {
				t.Errorf("end_of_execution %v, want restarted and not timed_out", end)
			}
			got := text(execute(t, url, map[string]any{"language": tc.language, "code": p.check}), "stdout")
			if got != p.fresh {
				t.Errorf("after the exit: %q, want %q from a fresh kernel", got, p.fresh)
			}
		})
	}
}

// TestEndOfExecutionFlags checks that end_of_execution says when the
// request's timeout interrupted the cell and when the kernel was lost.
func TestEndOfExecutionFlags(t *testing.T) {
	for _, tc := range []struct {
		name, language, code string
		timeout              float64
		timedOut, restarted  bool
		error                string // name, or shell exit status
	}{
		{"finished", "python", "1 + 1", 0, false, false, ""},
		{"raised", "python", "1 / 0", 10, false, false, "ZeroDivisionError"},
		{"interrupted", "python", "while True: pass", 0.5, true, false, "KeyboardInterrupt"},
		{"interrupt caught", "python", "import time\ntry:\n    while True: time.sleep(0.01)\nexcept KeyboardInterrupt:\n    print('caught')", 0.5, true, false, ""},
		{"interrupt ignored", "python", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)", 0.3, true, true, "KernelRestarted"},
		{"shell interrupted", "shell", "sleep 30", 0.5, true, false, "130"},
		{"javascript interrupted", "javascript", "while (true) {}", 0.5, true, false, "Error"},
		{"exited", "python", "import os; os._exit(1)", 10, false, true, "KernelExited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := serve(t, 0)
			// Up first: an interrupt that comes while a kernel boots finds
			// no cell to stop.
			execute(t, url, map[string]any{"language": tc.language, "code": map[string]string{"python": "pass", "javascript": "0", "shell": "true"}[tc.language]})
			evs := execute(t, url, map[string]any{"language": tc.language, "code": tc.code, "timeout": tc.timeout})
			end := evs[len(evs)-1]
			if (end["timed_out"] == true) != tc.timedOut || (end["restarted"] == true) != tc.restarted {
				t.Errorf("end_of_execution %v, want timed_out %v, restarted %v", end, tc.timedOut, tc.restarted)
			}
			for _, k := range []string{"timed_out", "restarted"} {
				if v, ok := end[k]; ok && v != true {
					t.Errorf("%s = %v: it is left out when false", k, v)
				}
			}
			e := find(evs, "error")
			switch {
			case tc.error == "" && e != nil:
				t.Errorf("unexpected error %v", e)
			case tc.error != "" && (e == nil || (e["name"] != tc.error && e["value"] != tc.error)):
				t.Errorf("error %v, want %s", e, tc.error)
			}
		})
	}
}
