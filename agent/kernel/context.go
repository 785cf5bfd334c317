package kernel

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mcpbox/mcpbox/agent/process"
	"github.com/mcpbox/mcpbox/agent/reaper"
)

// interruptGrace is how long an interrupted cell may take to stop before
// its kernel is killed and restarted.
const interruptGrace = 2 * time.Second

// drainWait bounds how long a dead kernel's pipes are read for what it
// wrote before it died: a process that left the kernel's process group
// (setsid) may hold them open for ever.
const drainWait = time.Second

// Event is one NDJSON line of an /execute reply.
type Event map[string]any

// kctx is one context: a kernel process with its own state and cwd.
type kctx struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`

	m *Manager
	// cell is held for a whole execution: a context runs one cell at a
	// time. Nothing else waits for it, so a restart can always rescue a
	// cell that does not end.
	cell sync.Mutex

	// mu guards the fields below and is only held for a moment.
	mu     sync.Mutex
	k      *kernelProc // nil until first use or after a death
	count  int         // execution_count of k
	closed bool        // deleted, or the manager is closed
	// lost is why a kernel ended during a call whose client had gone,
	// until the next call says so (or a restart makes it moot).
	lost *stopReason
}

// stopReason is why the agent killed a kernel, as the error event that
// ends a cell it interrupted says it.
type stopReason struct{ name, value string }

var (
	stopRestart = stopReason{"KernelRestarted", "the kernel was restarted by a request (POST /contexts/{id}/restart) while this cell ran; its state is lost"}
	stopDelete  = stopReason{"ContextDeleted", "the context was deleted while this cell ran; its kernel was stopped"}
	stopClose   = stopReason{"KernelRestarted", "the agent is shutting down; the kernel was stopped and its state is lost"}
	stopStuck   = stopReason{"KernelRestarted", fmt.Sprintf("the cell did not stop within %s of being interrupted; the kernel was restarted and its state is lost", interruptGrace)}
)

var errClosed = errors.New("the context was deleted")

// kernelProc is a running driver and the goroutines reading its pipes.
// They end when it is killed, whatever they were doing.
type kernelProc struct {
	child *reaper.Child
	req   *os.File
	// events carries the driver's fd 4 as batches of parsed lines; it is
	// closed at that pipe's end.
	events chan []kevent
	// out carries what the driver wrote to fd 1 and 2; a chunk with eof
	// set ends a stream.
	out     chan chunk
	pipes   []*os.File // the read ends, closed by kill
	readers sync.WaitGroup

	once sync.Once
	dead chan struct{} // closed by kill
	why  stopReason    // set before dead closes

	// eof says which of fd 1 and 2 has ended, and interrupted that the
	// last cell was sent SIGINT. Only the cell running on the kernel
	// touches them.
	eof         [2]bool
	interrupted bool
}

// kevent is one line of a driver's event pipe: an event, or the length
// of a line that was skipped for being too long.
type kevent struct {
	ev      Event
	skipped int64
}

type chunk struct {
	stream int // 0 stdout, 1 stderr
	data   []byte
	eof    bool
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
	var fds [8]*os.File // req, ev, out, err: read end then write end
	for i := 0; i < len(fds); i += 2 {
		if fds[i], fds[i+1], err = os.Pipe(); err != nil {
			for _, f := range fds[:i] {
				f.Close()
			}
			return nil, err
		}
	}
	reqR, reqW, evR, evW, outR, outW, errR, errW := fds[0], fds[1], fds[2], fds[3], fds[4], fds[5], fds[6], fds[7]
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		for _, f := range fds {
			f.Close()
		}
		return nil, err
	}
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
		for _, f := range []*os.File{reqW, evR, outR, errR} {
			f.Close()
		}
		return nil, fmt.Errorf("start %s kernel: %w", c.Language, err)
	}
	// Before any cell runs: what the kernel starts inherits its score, so
	// user code is what the OOM killer takes, not the agent.
	if err := reaper.SetOOMScoreAdj(child, reaper.ChildOOMScoreAdj); err != nil {
		c.m.log.Warn("kernel keeps the agent's OOM score", "language", c.Language, "err", err)
	}
	k := &kernelProc{
		child: child, req: reqW,
		events: make(chan []kevent), out: make(chan chunk, 64),
		pipes: []*os.File{evR, outR, errR}, dead: make(chan struct{}),
	}
	k.readers.Add(3)
	go k.readEvents(newLineReader(evR, c.m.opts.MaxEventBytes))
	go k.readOutput(outR, 0)
	go k.readOutput(errR, 1)
	return k, nil
}

// Batches of event lines: what the pipe already holds goes to the cell in
// one batch, so a flood of small events becomes a few large ones.
const (
	batchBytes  = 64 << 10
	batchEvents = 4096
)

// readEvents parses the driver's event lines until the pipe ends or the
// kernel is killed.
func (k *kernelProc) readEvents(lr *lineReader) {
	defer k.readers.Done()
	defer close(k.events)
	for {
		var batch []kevent
		size := 0
		var err error
		for err == nil && size < batchBytes && len(batch) < batchEvents {
			var line []byte
			var skipped int64
			line, skipped, err = lr.next()
			switch {
			case skipped > 0:
				batch = append(batch, kevent{skipped: skipped})
			case line != nil:
				if ev, ok := parseEvent(line); ok {
					batch = append(batch, kevent{ev: ev})
					size += len(line)
				}
			}
			if lr.r.Buffered() == 0 {
				break
			}
		}
		if len(batch) > 0 {
			select {
			case k.events <- batch:
			case <-k.dead:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readOutput forwards one of the driver's output pipes until it ends or
// the kernel is killed.
func (k *kernelProc) readOutput(f *os.File, stream int) {
	defer k.readers.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 && !k.send(chunk{stream: stream, data: bytes.Clone(buf[:n])}) {
			return
		}
		if err != nil {
			k.send(chunk{stream: stream, eof: true})
			return
		}
	}
}

func (k *kernelProc) send(ch chunk) bool {
	select {
	case k.out <- ch:
		return true
	case <-k.dead:
		return false
	}
}

// kill ends the kernel's process group, closes its pipes and waits for
// its reader goroutines. The first caller's reason is the one the running
// cell reports.
func (k *kernelProc) kill(why stopReason) {
	k.once.Do(func() {
		k.why = why
		close(k.dead)
		syscall.Kill(-k.child.Pid, syscall.SIGKILL)
		k.req.Close()
		for _, f := range k.pipes {
			f.Close()
		}
	})
	<-k.child.Done()
	k.readers.Wait()
}

// request is what the agent sends a driver for one cell.
type request struct {
	Code   string            `json:"code"`
	Env    map[string]string `json:"env,omitempty"`
	Marker string            `json:"marker"`
	Event  *json.RawMessage  `json:"event,omitempty"`
	// Timeout is the cell's timeout in seconds, which handler mode's
	// context reports as the time remaining.
	Timeout float64 `json:"timeout,omitempty"`
	// Settle says the agent sent SIGINT during the previous cell: the
	// JavaScript driver makes sure it is spent before this cell starts.
	Settle bool `json:"settle,omitempty"`
}

// kernel returns the context's kernel, starting one when there is none.
// The caller holds c.cell, so one start at most is under way.
func (c *kctx) kernel() (*kernelProc, error) {
	c.mu.Lock()
	k, closed := c.k, c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if k != nil {
		return k, nil
	}
	k, err := c.start()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed = c.closed
	if !closed {
		c.k, c.count = k, 0
	}
	c.mu.Unlock()
	if closed { // deleted while it started
		k.kill(stopDelete)
		return nil, errClosed
	}
	return k, nil
}

// stop kills the context's kernel without waiting for a running cell,
// which then ends saying why; closing stops it for good.
func (c *kctx) stop(why stopReason, closing bool) {
	c.mu.Lock()
	k := c.k
	c.k, c.count, c.lost = nil, 0, nil
	if closing {
		c.closed = true
	}
	c.mu.Unlock()
	if k != nil {
		k.kill(why)
	}
}

// setLost keeps why the kernel ended for the next call to report, unless
// a restart has come since.
func (c *kctx) setLost(why stopReason) {
	c.mu.Lock()
	if c.k == nil && !c.closed {
		c.lost = &why
	}
	c.mu.Unlock()
}

// forget kills k and, unless a restart already replaced it, leaves the
// context without a kernel for the next call to start.
func (c *kctx) forget(k *kernelProc, why stopReason) {
	c.mu.Lock()
	if c.k == k {
		c.k, c.count = nil, 0
	}
	c.mu.Unlock()
	k.kill(why)
}

// execute runs one cell and writes its events to out, always ending with
// end_of_execution.
func (c *kctx) execute(ctx context.Context, code string, env map[string]string, event *json.RawMessage, timeout time.Duration, out *reply) {
	c.cell.Lock()
	defer c.cell.Unlock()
	var timedOut, restarted bool
	defer func() {
		end := Event{"type": "end_of_execution"}
		if timedOut {
			end["timed_out"] = true
		}
		if restarted {
			end["restarted"] = true
		}
		out.send(end)
	}()
	if ctx.Err() != nil {
		// Gone before its cell started: the cell never runs, rather than
		// run late, after calls that came later. A kernel lost unheard
		// waits for a call that is heard.
		out.send(Event{"type": "error", "name": "ExecutionCancelled", "value": "the request was cancelled before its cell started; the cell did not run", "traceback": ""})
		return
	}
	c.mu.Lock()
	lost := c.lost
	c.lost = nil
	c.mu.Unlock()
	if lost != nil {
		// The kernel was lost while a call ran whose client had gone:
		// this reply is the first that can tell. The cell does not run,
		// as when a kernel is found dead between cells.
		restarted = true
		out.send(Event{"type": "error", "name": lost.name, "traceback": "",
			"value": "while an earlier call on this context ran, after its client had gone: " + lost.value + ". This cell did not run."})
		return
	}
	k, err := c.kernel()
	if err != nil {
		out.send(Event{"type": "error", "name": "KernelError", "value": err.Error(), "traceback": ""})
		return
	}
	b := make([]byte, 12)
	rand.Read(b)
	// No NUL: the shell driver frames cells with NUL, and bash variables
	// cannot hold one.
	marker := "\x1emcpbox-end-" + hex.EncodeToString(b) + "\x1e"
	msg, err := drivers[c.Language].encode(request{Code: code, Env: env, Marker: marker, Event: event, Timeout: timeout.Seconds(), Settle: k.interrupted})
	if err != nil {
		out.send(Event{"type": "error", "name": "InvalidRequest", "value": err.Error(), "traceback": ""})
		return
	}
	c.mu.Lock()
	c.count++
	n := c.count
	c.mu.Unlock()
	var r runResult
	k.interrupted = false
	if _, err := k.req.Write(msg); err != nil {
		// Gone between cells, or killed by a restart just now: the loop
		// finds out which.
		r = c.run(ctx, k, marker, 0, out, true)
	} else {
		r = c.run(ctx, k, marker, timeout, out, false)
	}
	timedOut = r.timedOut
	out.finish()
	// A client that went away reads no reply: a kernel lost now is told
	// of to the next call, unless a request of its own stopped it.
	unheard := ctx.Err() != nil
	switch r.end {
	case cellDied:
		why := died(r.status)
		c.forget(k, why)
		restarted = true
		if unheard {
			c.setLost(why)
		}
		out.send(Event{"type": "error", "name": why.name, "value": why.value, "traceback": ""})
		out.send(Event{"type": "unexpected_end_of_execution"})
	case cellKilled:
		c.forget(k, stopStuck) // a no-op unless the loop killed it
		restarted = true
		if unheard && k.why == stopStuck {
			c.setLost(k.why)
		}
		out.send(Event{"type": "error", "name": k.why.name, "value": k.why.value, "traceback": ""})
	default:
		if r.exitCode != 0 {
			out.send(Event{"type": "error", "name": "ExitCode", "value": fmt.Sprint(r.exitCode),
				"traceback": fmt.Sprintf("the cell ended with exit status %d", r.exitCode)})
		}
		out.send(Event{"type": "number_of_executions", "execution_count": n})
	}
}

// died says how a kernel ended by itself, once.
func died(ws syscall.WaitStatus) stopReason {
	const lost = "; its state is lost and the next call starts a fresh kernel"
	switch {
	case ws.Exited():
		return stopReason{"KernelExited", fmt.Sprintf("the kernel exited with status %d%s", ws.ExitStatus(), lost)}
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		return stopReason{"KernelDied", "the kernel was killed by SIGKILL (perhaps by the out-of-memory killer)" + lost}
	case ws.Signaled():
		return stopReason{"KernelDied", fmt.Sprintf("the kernel was killed by signal %d (%s)%s", ws.Signal(), ws.Signal(), lost)}
	}
	return stopReason{"KernelDied", "the kernel ended" + lost}
}

type cellEnd int

const (
	cellDone   cellEnd = iota // the driver said done and both streams reached the marker
	cellDied                  // the kernel ended by itself: exit, signal, or it closed its pipes
	cellKilled                // the agent killed it: k.why says why
)

type runResult struct {
	end      cellEnd
	status   syscall.WaitStatus // how a kernel that died ended
	exitCode int                // a shell cell's exit status
	timedOut bool               // the request's timeout interrupted the cell
}

// run forwards the cell's events and output until the driver says done
// and both output pipes reached the marker, or the kernel dies or is
// killed. gone says the cell never reached the kernel: only its end is
// awaited.
func (c *kctx) run(ctx context.Context, k *kernelProc, marker string, timeout time.Duration, out *reply, gone bool) runResult {
	var res runResult
	var timer, grace, drain <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	events, exited, cancelled := k.events, k.child.Done(), ctx.Done()
	dying := false
	// die ends what is left of a kernel that ended or broke its pipes, and
	// keeps reading them for what it wrote before: the loop then ends at
	// their end, or after drainWait.
	die := func() {
		if !dying {
			dying = true
			syscall.Kill(-k.child.Pid, syscall.SIGKILL)
			drain = time.After(drainWait)
			timer, grace, cancelled = nil, nil, nil
		}
	}
	if gone {
		die()
	}
	// An interrupt goes to the kernel only while the cell runs: after the
	// driver said "started" (before, it would find the driver reading the
	// request) and before its "done" (after, it would land on an idle
	// kernel, or on the next cell). One asked for sooner waits for
	// "started"; the grace runs from the asking, so a cell that never
	// starts is not waited on for ever.
	started, wantInterrupt, done := false, false, false
	interrupt := func() {
		if grace == nil && !dying {
			wantInterrupt = true
			grace = time.After(interruptGrace)
		}
	}
	signal := func() {
		if wantInterrupt && started && !done && !dying {
			wantInterrupt, k.interrupted = false, true
			syscall.Kill(-k.child.Pid, syscall.SIGINT)
		}
	}
	seen := k.eof // a stream that ended says nothing more
	var held [2]string
	// text forwards a stream's bytes, holding back a marker's length of
	// tail (the marker may straddle two reads) cut at a character's start.
	text := func(i int, data string) {
		data = held[i] + data
		if j := strings.Index(data, marker); j >= 0 {
			data, held[i], seen[i] = data[:j], "", true
		} else if keep := len(marker) - 1; len(data) > keep {
			cut := len(data) - keep
			for n := 0; n < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(data[cut]); n++ {
				cut--
			}
			data, held[i] = data[:cut], data[cut:]
		} else {
			data, held[i] = "", data
		}
		out.text(i, toUTF8(data))
	}
loop:
	for !(done && seen[0] && seen[1]) && !(dying && events == nil && k.eof[0] && k.eof[1]) {
		select {
		case batch, ok := <-events:
			if !ok {
				events = nil
				die()
				continue
			}
			for _, kev := range batch {
				if kev.ev["type"] == "started" {
					started = true
				} else if out.kernelEvent(kev) {
					done = !dying
					if n, ok := kev.ev["exit_code"].(float64); ok {
						res.exitCode = int(n)
					}
				}
			}
			// After the whole batch: a "done" in it means the cell is
			// over, however soon after "started" it came.
			signal()
			out.idle()
		case ch := <-k.out:
			i := ch.stream
			switch {
			case ch.eof:
				k.eof[i], seen[i] = true, true
				out.text(i, toUTF8(held[i]))
				held[i] = ""
			case !seen[i]: // else written after the cell ended
				text(i, string(ch.data))
			}
			out.idle()
		case <-exited:
			exited = nil
			die()
		case <-timer:
			timer = nil
			res.timedOut = true
			interrupt()
			signal()
		case <-cancelled:
			cancelled = nil
			interrupt()
			signal()
		case <-grace:
			k.kill(stopStuck)
			res.end = cellKilled
			return res
		case <-drain:
			break loop
		case <-k.dead:
			res.end = cellKilled
			return res
		}
	}
	if dying {
		for i := range held {
			out.text(i, toUTF8(held[i]))
		}
		res.end, res.status = cellDied, k.child.Wait()
	}
	return res
}

// toUTF8 keeps output that is not UTF-8 readable in JSON: each invalid
// run of bytes becomes U+FFFD, and valid text passes unchanged.
func toUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
