//go:build linux

package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A frozen group's processes stop where they are and go on after a thaw;
// a frozen group can still be killed.
func TestFreeze(t *testing.T) {
	g := newGroup(t, Limits{})
	file := filepath.Join(t.TempDir(), "count")
	start(t, g, "sh", "-c", `i=0; while :; do i=$((i+1)); echo $i > `+file+`; sleep 0.01; done`)
	count := func() int {
		b, _ := os.ReadFile(file)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for i := 0; !ok(); i++ {
			if i == 300 {
				t.Fatalf("%s: not within 3 s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("the loop runs", func() bool { return count() > 2 })

	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	if frozen, err := g.Frozen(); err != nil || !frozen {
		t.Fatalf("Frozen = %v, %v after Freeze", frozen, err)
	}
	before := count()
	time.Sleep(200 * time.Millisecond)
	if after := count(); after != before {
		t.Errorf("the loop ran on while frozen: %d then %d", before, after)
	}
	if err := g.Thaw(); err != nil {
		t.Fatal(err)
	}
	if frozen, _ := g.Frozen(); frozen {
		t.Error("still frozen after Thaw")
	}
	waitFor("the loop runs again after Thaw", func() bool { return count() > before })
	if err := g.Thaw(); err != nil {
		t.Errorf("thawing a thawed group: %v", err)
	}

	// Kill reaches a frozen group (newGroup's cleanup checks it empties).
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Errorf("Kill of a frozen group: %v", err)
		g.Thaw() // or the cleanup waits for ever on a frozen process
	}
}
