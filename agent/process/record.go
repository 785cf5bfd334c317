package process

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Errors of Output and Forget.
var (
	// ErrUnknownTag: no running process has the tag, and no finished one's
	// record is retained.
	ErrUnknownTag = errors.New("no process with this tag")
	// ErrRunning: the tagged process has not ended yet.
	ErrRunning = errors.New("the process is still running")
)

// Output is what the agent keeps of a tagged process, as served at
// GET /mcpbox/v1/processes/{tag}/output.
type Output struct {
	Tag     string    `json:"tag"`
	PID     uint32    `json:"pid"`
	Started time.Time `json:"started"`
	// Stdout and Stderr are the last TaggedOutputBytes of each stream,
	// with runs of invalid UTF-8 replaced by U+FFFD; the *Dropped counts
	// say how many older bytes no longer fit.
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StderrDropped int64  `json:"stderr_dropped"`
	// Done is true once the process has ended and all its output is
	// above; ExitCode, Exited and Status are then those of its end event.
	Done     bool   `json:"done"`
	ExitCode int    `json:"exit_code"`
	Exited   bool   `json:"exited"`
	Status   string `json:"status"`
}

// record is a tagged process's recent output and end, kept whether or not
// a stream is attached.
type record struct {
	tag     string
	pid     uint32
	started time.Time

	mu             sync.Mutex
	stdout, stderr ring
	done           bool
	exitCode       int
	exited         bool
	status         string
	// seq orders finished records, oldest first; expiry forgets one.
	// Both are guarded by Service.mu.
	seq    uint64
	expiry *time.Timer
}

func newRecord(tag string, pid uint32, max int) *record {
	return &record{tag: tag, pid: pid, started: time.Now(), stdout: ring{max: max}, stderr: ring{max: max}}
}

func (r *record) write(b []byte, stderr bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stderr {
		r.stderr.write(b)
	} else {
		r.stdout.write(b)
	}
}

func (r *record) end(code int, exited bool, status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.exitCode, r.exited, r.status = true, code, exited, status
}

func (r *record) output() *Output {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Output{
		Tag: r.tag, PID: r.pid, Started: r.started.UTC(),
		Stdout: r.stdout.text(), Stderr: r.stderr.text(),
		StdoutDropped: r.stdout.dropped, StderrDropped: r.stderr.dropped,
		Done: r.done, ExitCode: r.exitCode, Exited: r.exited, Status: r.status,
	}
}

// ring keeps the last max bytes written to it and counts the older bytes
// it let go. Its buffer grows as output comes, up to max.
type ring struct {
	max     int
	buf     []byte // len(buf) < max until the ring is full, then == max
	next    int    // where the next byte goes once full: the oldest byte
	dropped int64
}

func (r *ring) write(b []byte) {
	if len(b) >= r.max {
		r.dropped += int64(len(r.buf)) + int64(len(b)-r.max)
		if cap(r.buf) < r.max {
			r.buf = make([]byte, r.max)
		}
		r.buf = r.buf[:r.max]
		copy(r.buf, b[len(b)-r.max:])
		r.next = 0
		return
	}
	if len(r.buf) < r.max {
		n := min(len(b), r.max-len(r.buf))
		if len(r.buf)+n > cap(r.buf) {
			// Grow by doubling but never past max: append could.
			grown := make([]byte, len(r.buf), min(r.max, max(2*cap(r.buf), len(r.buf)+n, 4<<10)))
			copy(grown, r.buf)
			r.buf = grown
		}
		r.buf = append(r.buf, b[:n]...)
		b = b[n:]
	}
	for len(b) > 0 {
		n := copy(r.buf[r.next:], b)
		r.dropped += int64(n)
		r.next = (r.next + n) % r.max
		b = b[n:]
	}
}

// text returns the kept bytes, oldest first, as valid UTF-8.
func (r *ring) text() string {
	b := make([]byte, 0, len(r.buf))
	b = append(b, r.buf[r.next:]...)
	b = append(b, r.buf[:r.next]...)
	if r.dropped > 0 {
		// The cut may have split a character: drop its tail rather than
		// show a replacement character the process never wrote.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// Output returns what the agent keeps of the process tagged tag: a
// running one, or a finished one within TaggedRetention.
func (s *Service) Output(tag string) (*Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.tags[tag]; p != nil {
		return p.rec.output(), nil
	}
	if r := s.finished[tag]; r != nil {
		return r.output(), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownTag, tag)
}

// Forget drops the record of the finished process tagged tag.
func (s *Service) Forget(tag string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tags[tag] != nil {
		return fmt.Errorf("%q: %w: signal it first", tag, ErrRunning)
	}
	r := s.finished[tag]
	if r == nil {
		return fmt.Errorf("%w %q", ErrUnknownTag, tag)
	}
	s.dropLocked(r)
	return nil
}

// retainLocked keeps the record of a tagged process that just ended, for
// TaggedRetention, dropping the oldest finished records beyond
// MaxFinishedTagged.
func (s *Service) retainLocked(r *record) {
	s.seq++
	r.seq = s.seq
	s.finished[r.tag] = r
	r.expiry = time.AfterFunc(s.opts.TaggedRetention, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.finished[r.tag] == r {
			s.dropLocked(r)
		}
	})
	for len(s.finished) > s.opts.MaxFinishedTagged {
		var oldest *record
		for _, f := range s.finished {
			if oldest == nil || f.seq < oldest.seq {
				oldest = f
			}
		}
		s.dropLocked(oldest)
	}
}

func (s *Service) dropLocked(r *record) {
	delete(s.finished, r.tag)
	if r.expiry != nil {
		r.expiry.Stop()
	}
}
