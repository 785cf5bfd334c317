package agent

import (
	"sync"
	"time"
)

// deadlineRecheck bounds how long the deadline timer sleeps: timers run on
// the monotonic clock, the deadline is a wall-clock instant, and a clock
// set forward must not postpone the end by more than this.
const deadlineRecheck = time.Minute

// deadline is the instant the sandbox ends itself. Its timer re-arms with
// time.Until each time it fires, so a clock set back does not end the
// sandbox early either.
type deadline struct {
	passed chan struct{} // closed once the deadline has passed

	mu     sync.Mutex
	at     time.Time // zero: none; no monotonic reading
	timer  *time.Timer
	closed bool
}

func newDeadline(at time.Time) *deadline {
	d := &deadline{passed: make(chan struct{})}
	d.set(at)
	return d
}

// get returns the deadline, zero for none.
func (d *deadline) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// set replaces the deadline; zero means none. It reports false if the
// old one has already passed: the sandbox is ending and that stands.
func (d *deadline) set(at time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hasPassed() {
		return false
	}
	d.at = at.Round(0) // wall clock: the host's instant, not our uptime
	d.armLocked()
	return true
}

func (d *deadline) hasPassed() bool {
	select {
	case <-d.passed:
		return true
	default:
		return false
	}
}

// armLocked (re)starts the timer for the current deadline.
func (d *deadline) armLocked() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.at.IsZero() || d.closed || d.hasPassed() {
		return
	}
	left := time.Until(d.at)
	if left <= 0 {
		close(d.passed)
		return
	}
	d.timer = time.AfterFunc(min(left, deadlineRecheck), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.armLocked()
	})
}

// stop stops the timer for good.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.armLocked()
}
