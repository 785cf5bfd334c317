package kernel

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpbox/mcpbox/agent/process"
	"github.com/mcpbox/mcpbox/agent/reaper"
)

// interruptGrace is how long an interrupted cell may take to stop before
// its kernel is killed and restarted.
const interruptGrace = 2 * time.Second

// Event is one NDJSON line of an /execute reply.
type Event map[string]any

// kctx is one context: a kernel process with its own state and cwd.
// Executions on it are serialised by mu.
type kctx struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`

	m     *Manager
	mu    sync.Mutex // held for a whole execution
	count int        // execution_count

	k *kernelProc // nil until first use or after a death
}

// kernelProc is a running driver and its pipes.
type kernelProc struct {
	child  *reaper.Child
	req    *os.File
	events *bufio.Reader
	evFile *os.File
	// out carries what the driver wrote to fd 1 and 2, chunk by chunk.
	out chan chunk
}

type chunk struct {
	stderr bool
	data   []byte
}

// start launches the driver for c's language.
func (c *kctx) start() (*kernelProc, error) {
	drv, ok := drivers[c.Language]
	if !ok {
		return nil, fmt.Errorf("no kernel for language %q", c.Language)
	}
	path, err := process.LookPath(drv.program, c.m.opts.Env["PATH"])
	if err != nil {
		return nil, fmt.Errorf("%s is not installed in this sandbox: %w", drv.program, err)
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	devnull, _ := os.Open(os.DevNull)
	env := c.m.env(drv.env)
	sys := &syscall.SysProcAttr{Setpgid: true}
	if uint32(c.m.opts.UID) != uint32(os.Geteuid()) {
		sys.Credential = &syscall.Credential{Uid: uint32(c.m.opts.UID), Gid: uint32(c.m.opts.GID), Groups: []uint32{}}
	}
	args := drv.args
	if c.Language == "python" {
		args = c.m.pythonArgs
	}
	child, err := reaper.Start(path, append([]string{drv.program}, args...), &os.ProcAttr{
		Dir: c.Cwd, Env: env, Files: []*os.File{devnull, outW, errW, reqR, evW}, Sys: sys,
	})
	for _, f := range []*os.File{devnull, outW, errW, reqR, evW} {
		f.Close()
	}
	if err != nil {
		reqW.Close()
		evR.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start %s kernel: %w", c.Language, err)
	}
	k := &kernelProc{child: child, req: reqW, events: bufio.NewReaderSize(evR, 64<<10), evFile: evR, out: make(chan chunk, 256)}
	var wg sync.WaitGroup
	for _, p := range []struct {
		f      *os.File
		stderr bool
	}{{outR, false}, {errR, true}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.f.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := p.f.Read(buf)
				if n > 0 {
					k.out <- chunk{p.stderr, append([]byte(nil), buf[:n]...)}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(k.out) }()
	return k, nil
}

// kill ends the kernel process group and releases its pipes.
func (k *kernelProc) kill() {
	syscall.Kill(-k.child.Pid, syscall.SIGKILL)
	k.req.Close()
	<-k.child.Done()
	k.evFile.Close()
}

// request is what the agent sends a driver for one cell.
type request struct {
	Code   string            `json:"code"`
	Env    map[string]string `json:"env,omitempty"`
	Marker string            `json:"marker"`
	Event  *json.RawMessage  `json:"event,omitempty"`
}

// execute runs one cell, calling emit for every event in order. It always
// ends with end_of_execution.
func (c *kctx) execute(ctx context.Context, code string, env map[string]string, event *json.RawMessage, timeout time.Duration, emit func(Event)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer emit(Event{"type": "end_of_execution"})
	if c.k == nil {
		k, err := c.start()
		if err != nil {
			emit(Event{"type": "error", "name": "KernelError", "value": err.Error(), "traceback": ""})
			return
		}
		c.k = k
	}
	c.count++
	b := make([]byte, 12)
	rand.Read(b)
	// No NUL: the shell driver frames cells with NUL, and bash variables
	// cannot hold one.
	marker := "\x1emcpbox-end-" + hex.EncodeToString(b) + "\x1e"
	msg, err := drivers[c.Language].encode(request{Code: code, Env: env, Marker: marker, Event: event})
	if err != nil {
		emit(Event{"type": "error", "name": "InvalidRequest", "value": err.Error(), "traceback": ""})
		return
	}
	if _, err := c.k.req.Write(msg); err != nil {
		c.died(emit, "the kernel was gone before the cell started")
		return
	}
	r := c.run(ctx, marker, timeout, emit)
	switch {
	case r.died:
		c.died(emit, "the kernel died while running the cell ("+r.status+"); its state is lost and the next call starts a fresh one")
		return
	case r.killed:
		c.k.kill()
		c.k = nil
		emit(Event{"type": "error", "name": "KernelRestarted", "traceback": "",
			"value": fmt.Sprintf("the cell did not stop within %s of being interrupted; the kernel was restarted and its state is lost", interruptGrace)})
		return
	}
	if r.exitCode != 0 {
		emit(Event{"type": "error", "name": "ExitCode", "value": fmt.Sprint(r.exitCode),
			"traceback": fmt.Sprintf("the cell ended with exit status %d", r.exitCode)})
	}
	emit(Event{"type": "number_of_executions", "execution_count": c.count})
}

// died reports a dead kernel and forgets it.
func (c *kctx) died(emit func(Event), why string) {
	if c.k != nil {
		c.k.kill()
		c.k = nil
	}
	emit(Event{"type": "error", "name": "KernelDied", "value": why, "traceback": ""})
	emit(Event{"type": "unexpected_end_of_execution"})
}

type runResult struct {
	died, killed bool
	status       string
	// exitCode is a shell cell's exit status.
	exitCode int
}

// run forwards the cell's events and output until the driver says done
// and both output pipes reached the marker.
func (c *kctx) run(ctx context.Context, marker string, timeout time.Duration, emit func(Event)) runResult {
	k := c.k
	lines := make(chan Event)
	go func() {
		defer close(lines)
		for {
			b, err := k.events.ReadBytes('\n')
			if err != nil {
				return
			}
			var ev Event
			if json.Unmarshal(b, &ev) != nil {
				continue
			}
			last := ev["type"] == "done"
			lines <- ev // the receiver owns ev from here on
			if last {
				return
			}
		}
	}()
	lim := newLimiter(c.m.opts.MaxOutputBytes)
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	var grace <-chan time.Time
	interrupt := func() {
		if grace == nil {
			syscall.Kill(-k.child.Pid, syscall.SIGINT)
			grace = time.After(interruptGrace)
		}
	}
	done, seen, held := false, map[bool]bool{}, map[bool]string{}
	exitCode := 0
	ctxDone := ctx.Done()
	for !(done && seen[false] && seen[true]) {
		select {
		case ev, ok := <-lines:
			if !ok {
				if done {
					lines = nil
					continue
				}
				ws := k.child.Wait()
				return runResult{died: true, status: exitStatus(ws)}
			}
			if ev["type"] == "done" {
				done = true
				if n, ok := ev["exit_code"].(float64); ok {
					exitCode = int(n)
				}
				continue
			}
			if t, _ := ev["type"].(string); t == "stdout" || t == "stderr" {
				text, _ := ev["text"].(string)
				if text = lim.take(t == "stderr", text); text == "" {
					continue
				}
				ev["text"] = text
				ev["timestamp"] = time.Now().UnixMicro()
			}
			emit(ev)
		case ch, ok := <-k.out:
			if !ok {
				ws := k.child.Wait()
				return runResult{died: true, status: exitStatus(ws)}
			}
			if seen[ch.stderr] {
				continue // written after the cell ended
			}
			// Hold back a marker's length of tail: the marker may straddle
			// two reads. It is flushed when the marker arrives.
			data := held[ch.stderr] + string(ch.data)
			if i := strings.Index(data, marker); i >= 0 {
				data = data[:i]
				seen[ch.stderr] = true
				held[ch.stderr] = ""
			} else if keep := len(marker) - 1; len(data) > keep {
				held[ch.stderr] = data[len(data)-keep:]
				data = data[:len(data)-keep]
			} else {
				held[ch.stderr], data = data, ""
			}
			if text := lim.take(ch.stderr, toUTF8(data)); text != "" {
				name := "stdout"
				if ch.stderr {
					name = "stderr"
				}
				emit(Event{"type": name, "text": text, "timestamp": time.Now().UnixMicro()})
			}
		case <-timer:
			timer = nil
			interrupt()
		case <-ctxDone:
			ctxDone = nil
			interrupt()
		case <-grace:
			return runResult{killed: true}
		}
	}
	for _, note := range lim.notes() {
		emit(Event{"type": "stderr", "text": note, "timestamp": time.Now().UnixMicro()})
	}
	return runResult{exitCode: exitCode}
}

func exitStatus(ws syscall.WaitStatus) string {
	switch {
	case ws.Signaled():
		return "killed by signal " + ws.Signal().String()
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	}
	return "unknown status"
}

// limiter truncates each stream of one execution at max bytes, counting
// what it drops so the reply can say how much.
type limiter struct {
	max     int64
	sent    [2]int64
	dropped [2]int64
}

func newLimiter(max int64) *limiter { return &limiter{max: max} }

func (l *limiter) take(stderr bool, s string) string {
	i := 0
	if stderr {
		i = 1
	}
	room := l.max - l.sent[i]
	if room <= 0 {
		l.dropped[i] += int64(len(s))
		return ""
	}
	if int64(len(s)) > room {
		l.dropped[i] += int64(len(s)) - room
		s = s[:room]
	}
	l.sent[i] += int64(len(s))
	return s
}

func (l *limiter) notes() []string {
	var out []string
	for i, name := range []string{"stdout", "stderr"} {
		if l.dropped[i] > 0 {
			out = append(out, fmt.Sprintf("\n[mcpbox: %s truncated: %d bytes dropped beyond the %d-byte limit]\n", name, l.dropped[i], l.max))
		}
	}
	return out
}

// toUTF8 keeps output that is not UTF-8 readable in JSON: each invalid
// byte becomes U+FFFD, and valid text passes unchanged.
func toUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
