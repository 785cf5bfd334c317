package kernel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/agent/kernel"
)

// The interrupts tests: a cell's request is cancelled, or its timeout
// fires, or a stray SIGINT reaches the kernel, at random moments around
// the cell: before the driver has read it, while it runs, just after it
// ends. Whatever the moment, the cell ran or it did not (never twice),
// the kernel keeps its state, and the next cell is neither interrupted
// nor delayed. Only hangs are timed, generously.

// counter is how each language increments x and reads it back.
var counter = map[string]struct{ set, incr, read string }{
	"python":     {"x = %d", "x = x + 1", "x"},
	"javascript": {"var x = %d", "x = x + 1", "x"},
	"shell":      {"x=%d", "x=$((x+1))", "echo $x"},
}

// cancelAfter is the header that makes cancelServer cancel a request's
// context itself, that long after its handler starts: precise to a few
// microseconds, and the client still reads the whole reply.
const cancelAfter = "X-Test-Cancel-After"

// cancelServer serves a Manager; a request with the cancelAfter header
// has its context cancelled by the server, as a client going away would.
func cancelServer(t *testing.T) string {
	t.Helper()
	m := kernel.New(&kernel.Options{
		UID: os.Getuid(), GID: os.Getgid(), Home: t.TempDir(),
		Env: map[string]string{"PATH": path, "HOME": t.TempDir(), "LANG": "C.UTF-8"},
	})
	h := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.Header.Get(cancelAfter)); err == nil {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			if d < 0 { // gone before the agent saw it
				cancel()
			} else {
				timer := time.AfterFunc(d, cancel)
				defer timer.Stop()
			}
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { m.Close(); srv.Close() })
	return srv.URL
}

var hangClient = &http.Client{Timeout: hangAfter}

// call posts an execution and returns its events, failing the test on a
// hang or a malformed reply.
func call(t *testing.T, url string, body map[string]any, header http.Header) []event {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+"/execute", bytes.NewReader(b))
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hangClient.Do(req)
	if err != nil {
		t.Fatalf("hang: %v", err)
	}
	defer resp.Body.Close()
	var evs []event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad NDJSON line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("hang reading the reply: %v (so far %v)", err, evs)
	}
	if len(evs) == 0 || evs[len(evs)-1]["type"] != "end_of_execution" {
		t.Fatalf("reply does not end with end_of_execution: %v", evs)
	}
	return evs
}

// readX reads x back with a cell nothing interrupts: it must succeed,
// on the same kernel.
func readX(t *testing.T, url, language, ctxID string) (int, []event) {
	t.Helper()
	evs := call(t, url, map[string]any{"context_id": ctxID, "code": counter[language].read}, nil)
	if e := find(evs, "error"); e != nil || evs[len(evs)-1]["restarted"] == true {
		return -1, evs
	}
	s := strings.TrimSpace(text(evs, "stdout"))
	if r := find(evs, "result"); r != nil {
		s, _ = r["text"].(string)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1, evs
	}
	return n, evs
}

func newContext(t *testing.T, url, language string) string {
	t.Helper()
	resp, err := hangClient.Post(url+"/contexts", "application/json", strings.NewReader(`{"language":"`+language+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&c)
	return c.ID
}

// TestInterruptedIncrement cancels `x = x + 1` (or lets a tiny timeout
// interrupt it) at a random moment from before the driver reads it to
// after it ends, then reads x: it is the old value or the new one, on the
// same kernel, and reading it is not itself interrupted.
func TestInterruptedIncrement(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range []struct {
		language string
		n        int
	}{{"python", 400}, {"javascript", 250}, {"shell", 250}} {
		t.Run(tc.language, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, uint64(len(tc.language))))
			url := cancelServer(t)
			id := newContext(t, url, tc.language)
			const start = 1000
			call(t, url, map[string]any{"context_id": id, "code": fmt.Sprintf(counter[tc.language].set, start)}, nil)
			x, fails := start, 0
			for i := range tc.n {
				// Mostly within the first millisecond, where the cell is
				// written, read, run and ended; sometimes later.
				d := time.Duration(rng.IntN(1500)) * time.Microsecond
				if rng.IntN(4) == 0 {
					d = time.Duration(rng.IntN(8000)) * time.Microsecond
				}
				body := map[string]any{"context_id": id, "code": counter[tc.language].incr}
				var header http.Header
				how := "cancel"
				if i%3 == 2 {
					how = "timeout"
					body["timeout"] = max(d.Seconds(), 1e-6)
				} else {
					header = http.Header{cancelAfter: {d.String()}}
				}
				got := call(t, url, body, header)
				now, next := readX(t, url, tc.language, id)
				bad := ""
				switch {
				case got[len(got)-1]["restarted"] == true:
					bad = fmt.Sprintf("the interrupted cell lost the kernel: %v", got)
				case now == -1:
					bad = fmt.Sprintf("the next call did not read x: %v", next)
				case now != x && now != x+1:
					bad = fmt.Sprintf("x = %d, want %d or %d", now, x, x+1)
				case find(got, "error") == nil && find(got, "number_of_executions") != nil && now != x+1:
					bad = fmt.Sprintf("x = %d after a cell that finished, want %d", now, x+1)
				}
				if bad != "" {
					t.Errorf("%s after %s (iteration %d): %s", how, d, i, bad)
					if fails++; fails == 5 {
						t.FailNow()
					}
					// Start again from a known x.
					call(t, url, map[string]any{"context_id": id, "code": fmt.Sprintf(counter[tc.language].set, start)}, nil)
					x = start
					continue
				}
				x = now
			}
		})
	}
}

// stoppedByInterrupt says a reply is that of a cell SIGINT stopped, on
// a kernel that carries on.
func stoppedByInterrupt(evs []event) bool {
	e := find(evs, "error")
	if e == nil || evs[len(evs)-1]["restarted"] == true {
		return false
	}
	v, _ := e["value"].(string)
	return e["name"] == "KeyboardInterrupt" || v == "130" || strings.Contains(v, "interrupted")
}

// pids is how each language tells its kernel's pid.
var pids = map[string]string{"python": "import os; print(os.getpid())", "javascript": "console.log(process.pid)", "shell": "echo $$"}

// TestStraySIGINT sends SIGINT to a kernel's process group at random
// moments while cells run back to back, as a late or early interrupt
// would: a cell may be interrupted, but no cell is lost or run twice, the
// kernel does not exit, and no call hangs.
func TestStraySIGINT(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range []struct {
		language string
		n        int
	}{{"python", 400}, {"javascript", 250}, {"shell", 250}} {
		t.Run(tc.language, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, uint64(len(tc.language))+7))
			url := cancelServer(t)
			id := newContext(t, url, tc.language)
			call(t, url, map[string]any{"context_id": id, "code": fmt.Sprintf(counter[tc.language].set, 0)}, nil)
			pid, err := strconv.Atoi(strings.TrimSpace(text(call(t, url, map[string]any{"context_id": id, "code": pids[tc.language]}, nil), "stdout")))
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, 1))
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(r.IntN(3000)) * time.Microsecond):
						syscall.Kill(-pid, syscall.SIGINT)
					}
				}
			})
			ok, interrupted := 0, 0
			for i := 0; i < tc.n && !t.Failed(); i++ {
				body := map[string]any{"context_id": id, "code": counter[tc.language].incr}
				if rng.IntN(2) == 0 {
					body["timeout"] = 30
				}
				evs := call(t, url, body, nil)
				switch e := find(evs, "error"); {
				case evs[len(evs)-1]["restarted"] == true:
					t.Errorf("cell %d: a stray SIGINT cost the kernel: %v", i, evs)
				case e == nil:
					ok++
				default:
					interrupted++
				}
			}
			close(stop)
			wg.Wait()
			// The storm's last SIGINT may still stop a cell or two.
			x, evs := -1, []event(nil)
			for range 3 {
				if x, evs = readX(t, url, tc.language, id); x != -1 || !stoppedByInterrupt(evs) {
					break
				}
			}
			switch {
			case x == -1:
				t.Fatalf("x after the storm: %v", evs)
			case x < ok || x > ok+interrupted:
				t.Errorf("x = %d after %d cells that finished and %d interrupted: a cell was lost or ran twice", x, ok, interrupted)
			}
			if got := strings.TrimSpace(text(call(t, url, map[string]any{"context_id": id, "code": pids[tc.language]}, nil), "stdout")); got != strconv.Itoa(pid) {
				t.Errorf("the kernel is now %q, was %d", got, pid)
			}
			t.Logf("%d cells finished, %d interrupted", ok, interrupted)
		})
	}
}

// TestCancelledKernelLoss: when a cancelled call's kernel is lost (here,
// its cell ignores the interrupt and is killed), nobody reads that reply,
// so the next call says so instead of running on a fresh kernel as if
// nothing happened; the call after it runs normally. A call cancelled
// before its cell started does not run it.
func TestCancelledKernelLoss(t *testing.T) {
	url := cancelServer(t)
	id := newContext(t, url, "python")
	call(t, url, map[string]any{"context_id": id, "code": "x = 1"}, nil)
	evs := call(t, url, map[string]any{"context_id": id, "code": "x = 2"}, http.Header{cancelAfter: {"-1ns"}})
	if e := find(evs, "error"); e == nil || e["name"] != "ExecutionCancelled" || evs[len(evs)-1]["restarted"] == true {
		t.Errorf("a call cancelled before it started: %v", evs)
	}
	if x, evs := readX(t, url, "python", id); x != 1 {
		t.Errorf("x = %d (%v), want 1: the cancelled cell ran", x, evs)
	}
	evs = call(t, url, map[string]any{"context_id": id, "code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"},
		http.Header{cancelAfter: {"200ms"}})
	if e := find(evs, "error"); e == nil || e["name"] != "KernelRestarted" || evs[len(evs)-1]["restarted"] != true {
		t.Fatalf("a stubborn cancelled cell: %v", evs)
	}
	evs = call(t, url, map[string]any{"context_id": id, "code": "print('ran')"}, nil)
	if e := find(evs, "error"); e == nil || e["name"] != "KernelRestarted" || evs[len(evs)-1]["restarted"] != true || text(evs, "stdout") != "" {
		t.Errorf("the call after a kernel lost unheard: %v, want KernelRestarted, restarted, and the cell not run", evs)
	}
	evs = call(t, url, map[string]any{"context_id": id, "code": "print('ran', 'x' in globals())"}, nil)
	if find(evs, "error") != nil || evs[len(evs)-1]["restarted"] == true || text(evs, "stdout") != "ran False\n" {
		t.Errorf("the call after that: %v, want it to run on a fresh kernel", evs)
	}
	// A restart asked for makes the notice moot.
	call(t, url, map[string]any{"context_id": id, "code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"},
		http.Header{cancelAfter: {"200ms"}})
	resp, err := hangClient.Post(url+"/contexts/"+id+"/restart", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if evs := call(t, url, map[string]any{"context_id": id, "code": "print('ran')"}, nil); find(evs, "error") != nil || text(evs, "stdout") != "ran\n" {
		t.Errorf("after a restart: %v", evs)
	}
}
