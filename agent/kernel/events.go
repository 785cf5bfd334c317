package kernel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// User code can write to a driver's event pipe (it is an open fd in the
// kernel's process), so nothing read from it is trusted: lines are
// bounded as they are read, and what they say is bounded as it is sent.

// lineReader reads lines of at most max bytes without ever holding more:
// a longer line is skipped to its newline as it streams past.
type lineReader struct {
	r   *bufio.Reader
	max int
}

func newLineReader(r io.Reader, max int64) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: int(max)}
}

// next returns the next line without its newline or, for a line longer
// than max, nil and the line's length. A last line without a newline is
// dropped: drivers end every line, so it is what a dying kernel left
// half-written.
func (lr *lineReader) next() (line []byte, skipped int64, err error) {
	for {
		frag, err := lr.r.ReadSlice('\n')
		n := len(line) + len(frag)
		if err == nil {
			n-- // the newline
		}
		switch {
		case skipped > 0:
			skipped += int64(len(frag))
		case n > lr.max:
			skipped, line = int64(len(line)+len(frag)), nil
		default:
			line = append(line, frag...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil:
			return nil, 0, err
		case skipped > 0:
			return nil, skipped - 1, nil
		}
		return line[:len(line)-1], 0, nil
	}
}

// driverEvents are the event types a driver sends. Anything else on the
// pipe is ignored, so a cell cannot end its own reply early.
// "started" (the cell has begun: interrupts may go to it) is the caller's
// to handle too, and never reaches the reply.
var driverEvents = map[string]bool{"stdout": true, "stderr": true, "result": true, "error": true, "return_value": true, "done": true, "started": true}

// parseEvent decodes one line of a driver's event pipe.
func parseEvent(line []byte) (Event, bool) {
	var ev Event
	if json.Unmarshal(line, &ev) != nil {
		return nil, false
	}
	t, _ := ev["type"].(string)
	return ev, driverEvents[t]
}

// flushBytes is the most stream text one event carries.
const flushBytes = 64 << 10

var streamNames = [2]string{"stdout", "stderr"}

// reply writes one execution's events as NDJSON and keeps what the kernel
// sends within the Options' limits: each stream's text within
// MaxOutputBytes, results, errors and return values together within
// MaxResultBytes, each line within MaxEventBytes, and the kernel's events
// near MaxEvents. Stream text that arrives together goes out as one
// event; past MaxEvents, each stream's text goes out at most about once a
// second (stdout and stderr no longer interleaved) and other events are
// dropped. Notes on stderr at the end say what was cut.
type reply struct {
	w     io.Writer
	flush func() // pushes written lines to the client; may be nil
	opts  *Options
	buf   bytes.Buffer
	enc   *json.Encoder

	sent, dropped [2]int64 // stream bytes
	pend          [2][]byte
	merging       bool
	lastFlush     time.Time
	events        int64 // the kernel's events sent

	results                            int64 // bytes of results sent
	droppedResults, droppedResultBytes int64
	droppedEvents                      int64
	oversized, oversizedBytes          int64
}

// newReply writes to w within opts' limits, which New has filled in.
func newReply(w io.Writer, flush func(), opts *Options) *reply {
	r := &reply{w: w, flush: flush, opts: opts}
	r.enc = json.NewEncoder(&r.buf)
	// Markup in results stays as it came: escaping it would let a line
	// grow sixfold past the limits.
	r.enc.SetEscapeHTML(false)
	return r
}

func (r *reply) encode(ev Event) []byte {
	r.buf.Reset()
	r.enc.Encode(ev) // values decoded from JSON or made here always encode
	return r.buf.Bytes()
}

func (r *reply) write(b []byte, push bool) {
	r.w.Write(b) // a client that left stops reading; the cell still ends
	if push && r.flush != nil {
		r.flush()
	}
}

// send writes one of the agent's own events, outside the kernel's limits.
func (r *reply) send(ev Event) {
	r.flushText()
	t := ev["type"]
	r.write(r.encode(ev), t == "stderr" || t == "end_of_execution" || t == "unexpected_end_of_execution")
}

// kernelEvent sends, or counts, one line from a driver's event pipe; it
// reports the driver's "done", which is the caller's to handle.
func (r *reply) kernelEvent(kev kevent) (done bool) {
	if kev.skipped > 0 {
		r.oversize(kev.skipped)
		return false
	}
	switch t, _ := kev.ev["type"].(string); t {
	case "done":
		return true
	case "started":
		return false
	case "stdout":
		s, _ := kev.ev["text"].(string)
		r.text(0, s)
	case "stderr":
		s, _ := kev.ev["text"].(string)
		r.text(1, s)
	default:
		r.result(kev.ev)
	}
	return false
}

// text adds stream i's text, cut at its limit.
func (r *reply) text(i int, s string) {
	if s = r.limit(i, s); s == "" {
		return
	}
	if !r.merging && len(r.pend[1-i]) > 0 {
		r.flushStream(1 - i)
	}
	r.pend[i] = append(r.pend[i], s...)
	if len(r.pend[i]) >= flushBytes {
		r.flushStream(i)
	}
}

// limit cuts s to what is left of stream i's MaxOutputBytes, at a
// character's start, and counts the rest as dropped.
func (r *reply) limit(i int, s string) string {
	room := r.opts.MaxOutputBytes - r.sent[i]
	if int64(len(s)) <= room {
		r.sent[i] += int64(len(s))
		return s
	}
	cut := int(max(room, 0))
	for n := 0; n < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); n++ {
		cut--
	}
	r.dropped[i] += int64(len(s) - cut)
	r.sent[i] = r.opts.MaxOutputBytes // nothing later slips into what is left
	return s[:cut]
}

// idle sends the text gathered so far: nothing more is at hand.
func (r *reply) idle() {
	if !r.merging || time.Since(r.lastFlush) >= time.Second {
		r.flushText()
	}
}

func (r *reply) flushText() {
	r.flushStream(0)
	r.flushStream(1)
}

func (r *reply) flushStream(i int) {
	if len(r.pend[i]) == 0 {
		return
	}
	r.lastFlush = time.Now()
	ev := Event{"type": streamNames[i], "text": string(r.pend[i]), "timestamp": r.lastFlush.UnixMicro()}
	r.pend[i] = r.pend[i][:0]
	r.write(r.encode(ev), true)
	if r.events++; r.events >= r.opts.MaxEvents {
		r.merging = true
	}
}

// result sends a result, error or return_value event from the kernel, or
// counts it as dropped.
func (r *reply) result(ev Event) {
	if r.merging {
		r.droppedEvents++
		return
	}
	r.flushText()
	b := r.encode(ev)
	n := int64(len(b))
	switch {
	case n-1 > r.opts.MaxEventBytes: // it grew as it was re-encoded
		r.oversize(n - 1)
	case r.results+n > r.opts.MaxResultBytes:
		r.droppedResults++
		r.droppedResultBytes += n
	default:
		r.write(b, false)
		r.results += n
		if r.events++; r.events >= r.opts.MaxEvents {
			r.merging = true
		}
	}
}

// oversize counts an event line dropped for its size.
func (r *reply) oversize(n int64) {
	r.oversized++
	r.oversizedBytes += n
}

// finish sends the text still gathered and the notes on what was cut.
func (r *reply) finish() {
	r.flushText()
	var notes strings.Builder
	for i, name := range streamNames {
		if r.dropped[i] > 0 {
			fmt.Fprintf(&notes, "\n[mcpbox: %s truncated: %d bytes dropped beyond the %d-byte limit]\n", name, r.dropped[i], r.opts.MaxOutputBytes)
		}
	}
	if r.oversized > 0 {
		fmt.Fprintf(&notes, "\n[mcpbox: %d kernel events dropped for exceeding the %d-byte limit per event (%d bytes in all)]\n", r.oversized, r.opts.MaxEventBytes, r.oversizedBytes)
	}
	if r.droppedResults > 0 {
		fmt.Fprintf(&notes, "\n[mcpbox: %d results dropped (%d bytes) beyond the %d-byte limit for the results of one execution]\n", r.droppedResults, r.droppedResultBytes, r.opts.MaxResultBytes)
	}
	if r.droppedEvents > 0 {
		fmt.Fprintf(&notes, "\n[mcpbox: %d results dropped beyond the limit of %d events per execution]\n", r.droppedEvents, r.opts.MaxEvents)
	}
	if notes.Len() > 0 {
		r.send(Event{"type": "stderr", "text": notes.String(), "timestamp": time.Now().UnixMicro()})
	}
}
