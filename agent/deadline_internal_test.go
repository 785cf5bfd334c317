package agent

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestDeadlineTimer(t *testing.T) {
	passed := func(d *deadline) bool {
		synctest.Wait()
		select {
		case <-d.passed:
			return true
		default:
			return false
		}
	}
	tests := []struct {
		name  string
		steps func(t *testing.T, d *deadline)
	}{
		{"passes after several re-arms", func(t *testing.T, d *deadline) {
			d.set(time.Now().Add(3*deadlineRecheck + time.Second))
			time.Sleep(3 * deadlineRecheck)
			if passed(d) {
				t.Fatal("passed early")
			}
			time.Sleep(time.Second)
			if !passed(d) {
				t.Fatal("did not pass")
			}
		}},
		{"moved later", func(t *testing.T, d *deadline) {
			d.set(time.Now().Add(time.Second))
			d.set(time.Now().Add(time.Hour))
			time.Sleep(time.Hour - time.Second)
			if passed(d) {
				t.Fatal("the first deadline still counted")
			}
			time.Sleep(time.Second)
			if !passed(d) {
				t.Fatal("did not pass")
			}
		}},
		{"cleared", func(t *testing.T, d *deadline) {
			d.set(time.Now().Add(time.Second))
			d.set(time.Time{})
			time.Sleep(time.Hour)
			if passed(d) {
				t.Fatal("a cleared deadline passed")
			}
		}},
		{"in the past", func(t *testing.T, d *deadline) {
			d.set(time.Now().Add(-time.Second))
			if !passed(d) {
				t.Fatal("did not pass")
			}
			if d.set(time.Time{}) {
				t.Error("a passed deadline was changed")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newDeadline(time.Time{})
				defer d.stop()
				tt.steps(t, d)
			})
		})
	}
}
