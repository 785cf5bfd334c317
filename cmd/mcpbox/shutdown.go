package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcpbox/mcpbox"
)

// sayLeftRunning tells the operator of a serve that is stopping which
// sessions it leaves running, when each ends by itself, and how to stop
// them now: sandboxes outliving their server must never be a surprise.
func (m *Main) sayLeftRunning(s *stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := s.st.ListSessions(ctx, mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning, mcpbox.SessionPaused}})
	if err != nil {
		fmt.Fprintf(m.Stderr, "mcpbox: could not list the sessions left running: %v\n", err)
		return
	}
	var mine []*mcpbox.Session
	for _, x := range all {
		if x.Holder == s.mgr.Holder() {
			mine = append(mine, x)
		}
	}
	if len(mine) == 0 {
		fmt.Fprintln(m.Stderr, "mcpbox: no sessions left running")
		return
	}
	fmt.Fprintf(m.Stderr, "mcpbox: %d %s left running; the next mcpbox on %s adopts them, and unused each ends by itself:\n",
		len(mine), plural(len(mine), "session", "sessions"), s.rt.Home())
	for _, x := range mine {
		fmt.Fprintf(m.Stderr, "  %s  owner %s, ends by %s\n", x.ID, x.Owner, x.Deadline().Local().Format("15:04:05"))
	}
	fmt.Fprintln(m.Stderr, "mcpbox: to stop them now, run `mcpbox serve --stop-sessions-on-exit` and press Ctrl-C once it is up; "+
		"to have serve stop its sessions every time, set stop_sessions_on_exit: true")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// exitOnSecondInterrupt makes a second Ctrl-C (or SIGTERM) during
// shutdown end the process at once, as a user pressing it twice expects:
// shutdown waits up to 5 s for open streams, and longer when it stops
// sessions. What the sandboxes were doing is left as it is; the next
// mcpbox on the home looks after them. The returned func stops listening.
func (m *Main) exitOnSecondInterrupt() func() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			fmt.Fprintln(m.Stderr, "mcpbox: interrupted again; exiting now (sessions are left running; the next mcpbox on this home adopts them)")
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
