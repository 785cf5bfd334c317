package kernel_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/agent/kernel"
)

// hangAfter is how long a test waits for what must happen promptly: it
// only detects a hang, it does not measure speed.
const hangAfter = 20 * time.Second

// forge is Python that writes raw lines to the driver's event pipe, as
// any user code can.
const forge = "import os\ndef forge(b):\n    while b:\n        b = b[os.write(4, b):]\n"

// heapGrowth runs f and returns how far the heap grew above where it
// started, sampled while f ran.
func heapGrowth(f func()) uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-stopped
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}

// TestForgedEvents writes hostile lines straight to the event pipe: the
// reply stays within the limits and well-formed, the agent's memory stays
// bounded, and the kernel carries on with its state.
func TestForgedEvents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  kernel.Options
		code  string
		check func(t *testing.T, evs []event)
	}{{
		name: "oversized result",
		opts: kernel.Options{MaxEventBytes: 1 << 20},
		code: forge + "forge(b'{\"type\":\"result\",\"text\":\"')\nfor _ in range(128): forge(b'x' * (1 << 20))\nforge(b'\"}\\n')\nprint('after')",
		check: func(t *testing.T, evs []event) {
			if r := find(evs, "result"); r != nil {
				t.Errorf("an oversized result came through: %d bytes", len(fmt.Sprint(r)))
			}
			if !strings.Contains(text(evs, "stderr"), "1 kernel events dropped for exceeding the 1048576-byte limit") {
				t.Errorf("no note on the dropped event: %q", text(evs, "stderr"))
			}
		},
	}, {
		name: "results beyond the budget",
		opts: kernel.Options{MaxResultBytes: 1 << 20},
		code: forge + "line = b'{\"type\":\"result\",\"text\":\"' + b'r' * 100000 + b'\"}\\n'\nfor _ in range(40): forge(line)\nprint('after')",
		check: func(t *testing.T, evs []event) {
			n := 0
			for _, ev := range evs {
				if ev["type"] == "result" {
					b, _ := json.Marshal(ev)
					n += len(b)
				}
			}
			if n == 0 || n > 1<<20 {
				t.Errorf("%d bytes of results, want some and at most 1 MiB", n)
			}
			if !strings.Contains(text(evs, "stderr"), "results dropped") {
				t.Errorf("no note on the dropped results: %q", text(evs, "stderr"))
			}
		},
	}, {
		name: "flood of small events",
		opts: kernel.Options{MaxEvents: 1000},
		code: forge + "chunk = b'{\"type\":\"stdout\",\"text\":\"z\"}\\n{\"type\":\"stderr\",\"text\":\"b\"}\\n{\"type\":\"result\",\"text\":\"c\"}\\n' * 1000\nfor _ in range(100): forge(chunk)\nprint('after')",
		check: func(t *testing.T, evs []event) {
			if len(evs) > 1000+100 {
				t.Errorf("%d events in the reply, want about 1000 at most", len(evs))
			}
			// Output is merged, not lost.
			if got := strings.Count(text(evs, "stdout"), "z"); got != 100000 {
				t.Errorf("%d of 100000 forged stdout bytes arrived", got)
			}
			if !strings.Contains(text(evs, "stderr"), "beyond the limit of 1000 events") {
				t.Errorf("no note on the dropped events")
			}
		},
	}, {
		name: "forged output shares the stream limit",
		opts: kernel.Options{MaxOutputBytes: 64 << 10},
		code: forge + "forge(b'{\"type\":\"stdout\",\"text\":\"' + b'f' * 200000 + b'\",\"junk\":\"' + b'j' * 1000000 + b'\"}\\n')\nprint('x' * 100000)",
		check: func(t *testing.T, evs []event) {
			out := text(evs, "stdout")
			if len(out) != 64<<10 || !strings.HasPrefix(out, "fff") {
				t.Errorf("%d bytes of stdout, want the forged text cut at 64 KiB", len(out))
			}
			for _, ev := range evs {
				if ev["junk"] != nil {
					t.Fatal("a forged field came through on a stdout event")
				}
			}
			if !strings.Contains(text(evs, "stderr"), "stdout truncated") {
				t.Errorf("no truncation note: %q", text(evs, "stderr"))
			}
		},
	}, {
		name: "forged ends",
		code: forge + "forge(b'{\"type\":\"end_of_execution\"}\\n{\"type\":\"unexpected_end_of_execution\"}\\n{\"type\":\"number_of_executions\",\"execution_count\":99}\\n')\nforge(b'not json\\n{\"type\":\"stdout\"\\n[1,2]\\nnull\\n')\nprint('after')",
		check: func(t *testing.T, evs []event) {
			for _, typ := range []string{"end_of_execution", "unexpected_end_of_execution", "number_of_executions"} {
				n := 0
				for _, ev := range evs {
					if ev["type"] == typ {
						n++
					}
				}
				if want := map[bool]int{true: 1}[typ != "unexpected_end_of_execution"]; n != want {
					t.Errorf("%d %s events, want %d", n, typ, want)
				}
			}
			if n := find(evs, "number_of_executions"); n["execution_count"] != float64(2) {
				t.Errorf("execution count %v, want 2", n)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			url := serveWith(t, &tc.opts)
			run(t, url, "kept = 'yes'")
			var evs []event
			grew := heapGrowth(func() { evs = run(t, url, tc.code) })
			if grew > 48<<20 {
				t.Errorf("the agent's heap grew by %d MiB", grew>>20)
			}
			if e := find(evs, "error"); e != nil || find(evs, "number_of_executions") == nil {
				t.Errorf("the cell did not finish: %v", e)
			}
			tc.check(t, evs)
			if got := text(run(t, url, "print(kept)"), "stdout"); got != "yes\n" {
				t.Errorf("the kernel after: %q, want its state kept", got)
			}
		})
	}
}

// stream posts an execution and returns a channel that yields its events
// as they come, closed at the reply's end.
func stream(t *testing.T, url string, body map[string]any) <-chan event {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/execute", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ch := make(chan event, 1024)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev event
			json.Unmarshal(sc.Bytes(), &ev)
			ch <- ev
		}
	}()
	return ch
}

// TestStopRunningCell checks that a restart or a delete does not wait for
// the cell it is meant to rescue: both it and the cell end promptly.
func TestStopRunningCell(t *testing.T) {
	for _, tc := range []struct{ name, method, path, error string }{
		{"restart", http.MethodPost, "/restart", "KernelRestarted"},
		{"delete", http.MethodDelete, "", "ContextDeleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := serve(t, 0)
			resp, err := http.Post(url+"/contexts", "application/json", strings.NewReader(`{"language":"python"}`))
			if err != nil {
				t.Fatal(err)
			}
			var c struct{ ID string }
			json.NewDecoder(resp.Body).Decode(&c)
			execute(t, url, map[string]any{"context_id": c.ID, "code": "kept = 1"})
			evs := stream(t, url, map[string]any{"context_id": c.ID, "code": "print('started', flush=True)\nwhile True: pass"})
			for out, deadline := "", time.After(hangAfter); out != "started\n"; {
				select {
				case ev := <-evs:
					if ev["type"] != "stdout" {
						t.Fatalf("event %v before the cell started", ev)
					}
					out += ev["text"].(string)
				case <-deadline:
					t.Fatal("the cell did not start")
				}
			}
			req, _ := http.NewRequest(tc.method, url+"/contexts/"+c.ID+tc.path, nil)
			client := &http.Client{Timeout: hangAfter}
			resp, err = client.Do(req)
			if err != nil {
				t.Fatalf("%s waited behind the cell: %v", tc.name, err)
			}
			if resp.StatusCode != http.StatusNoContent {
				t.Errorf("%s: status %d", tc.name, resp.StatusCode)
			}
			var rest []event
			for deadline := time.After(hangAfter); ; {
				select {
				case ev, ok := <-evs:
					if ok {
						rest = append(rest, ev)
						continue
					}
				case <-deadline:
					t.Fatalf("the cell did not end after the %s: %v", tc.name, rest)
				}
				break
			}
			if e := find(rest, "error"); e == nil || e["name"] != tc.error {
				t.Errorf("error %v, want %s", e, tc.error)
			}
			if len(rest) == 0 || rest[len(rest)-1]["type"] != "end_of_execution" || rest[len(rest)-1]["restarted"] != true {
				t.Errorf("reply %v, want it to end with end_of_execution, restarted", rest)
			}
			if tc.name == "restart" {
				if e := find(execute(t, url, map[string]any{"context_id": c.ID, "code": "kept"}), "error"); e == nil || e["name"] != "NameError" {
					t.Errorf("after the restart: %v, want a fresh kernel", e)
				}
			}
		})
	}
}

// kernelGoroutines lists the goroutines running this package's code.
func kernelGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "mcpbox/agent/kernel.") {
			out = append(out, g)
		}
	}
	return out
}

// TestNoGoroutineLeaks kills kernels mid-cell in several ways: once their
// manager is closed, none of the goroutines that read them is left.
func TestNoGoroutineLeaks(t *testing.T) {
	m := kernel.New(&kernel.Options{
		UID: os.Getuid(), GID: os.Getgid(), Home: t.TempDir(),
		Env: map[string]string{"PATH": path, "HOME": t.TempDir(), "LANG": "C.UTF-8"},
	})
	srv := httptest.NewServer(m.Handler())
	url := srv.URL
	for i := 0; i < 4; i++ {
		run(t, url, "print('up')")
		run(t, url, "import os\nfor i in range(2000): print(i)\nos._exit(1)")
		run(t, url, "import os, signal\nfor i in range(2000): print(i, file=__import__('sys').stderr)\nos.kill(os.getpid(), signal.SIGKILL)")
		execute(t, url, map[string]any{"language": "shell", "code": "seq 100000; kill -9 $$"})
		execute(t, url, map[string]any{"language": "js", "code": "for (let i = 0; i < 2000; i++) console.log(i); process.exit(1)", "timeout": 60})
	}
	srv.Close()
	m.Close()
	left := kernelGoroutines()
	for deadline := time.Now().Add(hangAfter); len(left) > 0 && time.Now().Before(deadline); left = kernelGoroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// TestOOMScore checks that kernels, and what they start, are the OOM
// killer's first choice.
func TestOOMScore(t *testing.T) {
	if b, _ := os.ReadFile("/proc/self/oom_score_adj"); strings.TrimSpace(string(b)) == "1000" {
		t.Skip("this test already runs with oom_score_adj 1000")
	}
	url := serve(t, 0)
	for _, tc := range []struct{ language, code string }{
		{"python", "print(open('/proc/self/oom_score_adj').read().strip())"},
		{"javascript", "console.log(require('fs').readFileSync('/proc/self/oom_score_adj', 'utf8').trim())"},
		{"shell", "cat /proc/$$/oom_score_adj; cat /proc/self/oom_score_adj"},
	} {
		t.Run(tc.language, func(t *testing.T) {
			out := text(execute(t, url, map[string]any{"language": tc.language, "code": tc.code}), "stdout")
			for _, line := range strings.Fields(out) {
				if line != "1000" {
					t.Errorf("oom_score_adj %q, want 1000", out)
				}
			}
			if out == "" {
				t.Error("no output")
			}
		})
	}
}
