package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

var (
	chaos        = flag.Bool("chaos", false, "run TestChaos: go test -run TestChaos -v -timeout 30m ./e2e/ -chaos (as root)")
	chaosClients = flag.Int("chaos-clients", 16, "TestChaos: concurrent clients")
	chaosCalls   = flag.Int("chaos-calls", 2000, "TestChaos: calls per client")
	chaosRounds  = flag.Int("chaos-rounds", 3, "TestChaos: kills of each kind (agent, kernel, serve)")
	chaosSeed    = flag.Uint64("chaos-seed", 0, "TestChaos: seed of the kill schedule; 0 takes one from the clock (it is logged)")
)

// Error classes of the chaos run. Those starting "chaos:" are what the
// kills are allowed to cause; any other fails the test.
const (
	cConnectDown   = "chaos: connect refused while serve was down"
	cTransport     = "chaos: call broken by serve's kill"
	cAgentInFlight = "chaos: call in flight when its agent was killed"
	cEnded         = "chaos: session reported ended (SESSION_NOT_FOUND) after its agent was killed"
	cKernelLost    = "chaos: kernel death reported (state lost), setup re-run"
	cReportLost    = "chaos: kernel death reported to a call lost with serve, setup re-run"

	fAgentDead    = "FAIL: agent dead, session not reported ended"
	fSessionLost  = "FAIL: session ended though its agent was not killed"
	fKernelLost   = "FAIL: kernel state lost though no kernel was killed"
	fStateSilent  = "FAIL: kernel state lost without a report"
	fStateLost    = "FAIL: kernel state lost without a report, after a call broken by serve's kill (no kernel killed)"
	fHang         = "FAIL: hang"
	fTransport    = "FAIL: transport error with serve up"
	fConnect      = "FAIL: connect failed with serve up"
	fWrongResult  = "FAIL: wrong result"
	fUnclassified = "FAIL: unclassified"
)

// TestChaos runs the soak's load while it kills, with SIGKILL and at
// moments drawn from a seeded schedule, a random sandbox agent, a random
// kernel and serve itself (restarted on the same home and port). Clients
// reconnect, and recreate what the chaos took, counting every error by
// class. Afterwards every session is either working with its state or
// reported ended, serve re-adopted the live sandboxes at each restart,
// nothing leaks once serve stops, and no call hung.
func TestChaos(t *testing.T) {
	if !*chaos {
		t.Skip("chaos run: run it as root with `go test -run TestChaos -v -timeout 30m ./e2e/ -chaos`")
	}
	testutil.RequireRoot(t)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (rerun the same schedule with -chaos-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	bin := build(t)
	home := testutil.Home(t)
	s := &server{bin: bin, home: home, url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	nc, calls := *chaosClients, *chaosCalls
	w := &chaosWorld{s: s, env: soakEnv(home, nc), home: home, up: make(chan struct{}),
		agentKilled: map[string]*agentKill{}, kernelKilled: map[string][]time.Time{}, current: map[int]string{}, ids: map[string]bool{},
		errs: newErrCounts()}
	close(w.up)
	p, err := startServe(s, w.env, "--stop-sessions-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	w.logs = append(w.logs, p.log)
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mcpbox serve log of the last run (tail):\n%s", tail(w.p.log.String(), 8000))
		}
		if stopped {
			return
		}
		// A failed run still stops its sandboxes: a serve that adopts
		// and stops them, if the one of the moment is gone.
		stopServe(w.p, time.Minute)
		if len(sessionDirs(home)) > 0 {
			if p, err := startServe(s, w.env, "--stop-sessions-on-exit"); err == nil {
				stopServe(p, time.Minute)
			}
		}
	})

	cl := make([]*chaosClient, nc)
	for i := range cl {
		cl[i] = &chaosClient{loadClient: &loadClient{url: s.url, start: 1000 * (i + 1)}, w: w, idx: i}
		defer cl[i].close()
	}

	// The schedule: each kind of kill rounds times, in a random order, each
	// when the load reaches a random point between 5% and 90% of its calls.
	total := int64(nc * calls)
	var kinds []string
	for range *chaosRounds {
		kinds = append(kinds, "agent", "kernel", "serve")
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	at := map[int64]int{}
	for len(at) < len(kinds) {
		n := total*5/100 + rng.Int64N(total*85/100)
		if _, dup := at[n]; !dup {
			at[n] = len(at)
		}
	}
	marks := slices.Sorted(maps.Keys(at))
	trigger := make(chan int64, len(marks))
	var done atomic.Int64
	progress := func() {
		n := done.Add(1)
		if _, ok := at[n]; ok {
			trigger <- n
		}
	}

	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range cl {
		wg.Go(func() { c.run(calls, progress) })
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()

	// The injector: one kill at a time, in schedule order.
	var events []string
inject:
	for k := range marks {
		select {
		case n := <-trigger:
			ev := w.inject(t, rng, kinds[k])
			events = append(events, fmt.Sprintf("at call %d (%.0f%%): %s", n, 100*float64(n)/float64(total), ev))
			t.Logf("chaos event %d/%d at call %d: %s", k+1, len(marks), n, ev)
		case <-clientsDone:
			t.Errorf("the clients stopped before chaos events %d-%d ran", k+1, len(marks))
			break inject
		}
	}
	<-clientsDone
	elapsed := time.Since(start)

	var lat []time.Duration
	for _, c := range cl {
		lat = append(lat, c.lat...)
		if c.fatal != nil {
			t.Errorf("client %d gave up: %v", c.idx, c.fatal)
		}
	}
	slices.Sort(lat)
	t.Logf("%d calls (%d clients × %d) in %s: %.0f calls/s, %d succeeded; p50 %s, p99 %s, max %s",
		total, nc, calls, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), len(lat), pct(lat, 50), pct(lat, 99), pct(lat, 100))
	t.Logf("errors by class: %s", w.errs)

	// Quiesce: every client ends with a usable session holding its x.
	for _, c := range cl {
		if err := c.settle(); err != nil {
			t.Errorf("client %d: no working session after the load: %v", c.idx, err)
		}
	}
	// A last kill of serve with nothing in flight: the restart must adopt
	// exactly the sandboxes that are alive, and each must keep its state.
	alive := w.aliveSandboxes()
	ev := w.inject(t, rng, "serve")
	events = append(events, "after the load: "+ev)
	t.Logf("final serve kill: %s", ev)
	last := w.restarts[len(w.restarts)-1]
	if last.adopted != alive {
		t.Errorf("the final restart re-adopted %d sessions; %d sandboxes were alive", last.adopted, alive)
	}
	kept, survived := 0, 0
	for _, c := range cl {
		c.close()
		if err := c.ensureConn(); err != nil {
			t.Errorf("client %d: reconnect after the final restart: %v", c.idx, err)
			continue
		}
		got, err := c.read()
		if err != nil || (got != c.x && !(c.uncertain && got == c.x+1)) {
			t.Errorf("client %d: session %s has x = %d (%v) after the final restart, want %d: state lost", c.idx, c.sid, got, err, c.x)
			continue
		}
		kept++
		if c.sidEpoch < w.epochNow() {
			survived++
		}
	}
	// Every session a client left because it was reported ended stays
	// ended: it answers SESSION_NOT_FOUND, never a result nor another error.
	ended := 0
	for _, c := range cl {
		for _, sid := range c.left {
			_, err := c.exec(sid, "x")
			var te *toolErr
			if !errors.As(err, &te) || te.out.ErrorCode != mcpbox.ESESSION {
				t.Errorf("client %d: session %s, left after it was reported ended, answers %v; want %s", c.idx, sid, err, mcpbox.ESESSION)
				continue
			}
			ended++
		}
	}
	t.Logf("sessions: %d of %d kept with their state (%d of them through at least one serve restart), %d reported ended and left",
		kept, nc, survived, ended)
	for i, r := range w.restarts {
		t.Logf("serve restart %d: %d sessions re-adopted, %d ended, %d orphans cleaned (%d sandboxes alive at the kill), back in %s",
			i+1, r.adopted, r.ended, r.orphans, r.aliveBefore, r.took.Round(time.Millisecond))
	}

	// Stop everything; nothing may be left.
	for _, c := range cl {
		c.close()
	}
	w.mu.Lock()
	clean := stopServe(w.p, time.Minute)
	w.mu.Unlock()
	stopped = true
	if !clean {
		t.Errorf("serve did not exit within a minute of SIGINT; killed")
	}
	ids := w.allIDs()
	if l := waitNoLeaks(home, bin, ids, 15*time.Second); len(l) > 0 {
		t.Errorf("left behind after serve stopped:\n%s", strings.Join(l, "\n"))
	} else {
		t.Logf("leak check: no process, mount, cgroup, session directory or live record left of %d sessions", len(ids))
	}

	t.Logf("chaos events:\n  %s", strings.Join(events, "\n  "))
	if n := w.failures(); n > 0 {
		t.Errorf("%d errors the chaos does not explain:%s", n, w.errs.detail())
	}
}

// chaosWorld is what the clients and the injector share: the serve
// process of the moment and what has been killed, so that clients can tell
// an error the chaos caused from one it did not.
type chaosWorld struct {
	s    *server
	env  []string
	home string
	errs *errCounts

	mu           sync.Mutex
	p            *proc
	logs         []*syncBuffer
	epoch        int           // serve kills so far
	down         bool          // serve is killed and not yet back
	up           chan struct{} // closed when serve is back
	agentKilled  map[string]*agentKill
	kernelKilled map[string][]time.Time
	current      map[int]string // each client's session
	ids          map[string]bool
	restarts     []restart
}

// agentKill is one kill of a session's agent: gone is closed once the
// agent is seen dead, at dead.
type agentKill struct {
	gone chan struct{}
	dead time.Time
}

type restart struct {
	adopted, ended, orphans, aliveBefore int
	took                                 time.Duration
}

func (w *chaosWorld) epochNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch
}

// serveState is the epoch, whether serve is down, and the channel closed
// when it is back.
func (w *chaosWorld) serveState() (int, bool, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch, w.down, w.up
}

func (w *chaosWorld) setCurrent(client int, sid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sid == "" {
		delete(w.current, client)
		return
	}
	w.current[client] = sid
	w.ids[sid] = true
}

// agentKill reports whether sid's agent was killed and when it was seen
// gone, waiting (up to 15 s) for a kill under way to be seen through: a
// call that then fails started after the agent was dead, or before.
func (w *chaosWorld) agentKill(sid string) (time.Time, bool) {
	w.mu.Lock()
	k := w.agentKilled[sid]
	w.mu.Unlock()
	if k == nil {
		return time.Time{}, false
	}
	select {
	case <-k.gone:
	case <-time.After(15 * time.Second):
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return k.dead, true
}

// lastKernelKill is when sid's kernel was last killed (zero for never).
func (w *chaosWorld) lastKernelKill(sid string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.kernelKilled[sid]
	if len(k) == 0 {
		return time.Time{}
	}
	return k[len(k)-1]
}

func (w *chaosWorld) failures() int {
	w.errs.mu.Lock()
	defer w.errs.mu.Unlock()
	n := 0
	for k, v := range w.errs.n {
		if !strings.HasPrefix(k, "chaos:") {
			n += v
		}
	}
	return n
}

// aliveSandboxes counts the sandboxes on the home whose agent runs.
func (w *chaosWorld) aliveSandboxes() int {
	n := 0
	for _, id := range sessionDirs(w.home) {
		if agentPID(w.home, id) != 0 {
			n++
		}
	}
	return n
}

func (w *chaosWorld) allIDs() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := map[string]bool{}
	for id := range w.ids {
		ids[id] = true
	}
	for _, l := range w.logs {
		for id := range sessionsInLog(l.String()) {
			ids[id] = true
		}
	}
	for _, id := range sessionDirs(w.home) {
		ids[id] = true
	}
	return ids
}

// victims are the sessions clients use now whose agent runs, in a stable
// order for the seeded choice.
func (w *chaosWorld) victims() []string {
	w.mu.Lock()
	var out []string
	for _, sid := range w.current {
		if _, killed := w.agentKilled[sid]; !killed {
			out = append(out, sid)
		}
	}
	w.mu.Unlock()
	slices.Sort(out)
	return out
}

// inject carries out one kill and says what it did.
func (w *chaosWorld) inject(t *testing.T, rng *rand.Rand, kind string) string {
	switch kind {
	case "agent":
		v := w.victims()
		rng.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
		for _, sid := range v {
			pid := agentPID(w.home, sid)
			if pid == 0 {
				continue
			}
			k := &agentKill{gone: make(chan struct{})}
			w.mu.Lock()
			w.agentKilled[sid] = k
			w.mu.Unlock()
			if err := kill9(pid); err != nil {
				t.Errorf("kill agent %d: %v", pid, err)
			}
			if !waitGone(pid, 10*time.Second) {
				t.Errorf("agent %d of session %s still runs 10 s after SIGKILL", pid, sid)
			}
			w.mu.Lock()
			k.dead = time.Now()
			w.mu.Unlock()
			close(k.gone)
			return fmt.Sprintf("kill -9 agent %d of session %s", pid, sid)
		}
		return "agent kill skipped: no session with a live agent"
	case "kernel":
		v := w.victims()
		rng.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
		for _, sid := range v {
			apid := agentPID(w.home, sid)
			if apid == 0 {
				continue
			}
			var kernels []int
			for _, pid := range allPIDs() {
				if st, err := readStat(pid); err == nil && st.ppid == apid && st.comm == "python3" && st.state != 'Z' {
					kernels = append(kernels, pid)
				}
			}
			if len(kernels) == 0 {
				continue
			}
			k := kernels[rng.IntN(len(kernels))]
			w.mu.Lock()
			w.kernelKilled[sid] = append(w.kernelKilled[sid], time.Now())
			w.mu.Unlock()
			if err := kill9(k); err != nil {
				t.Errorf("kill kernel %d: %v", k, err)
			}
			return fmt.Sprintf("kill -9 python3 kernel %d (agent %d) of session %s", k, apid, sid)
		}
		return "kernel kill skipped: no session with a live kernel"
	case "serve":
		alive := w.aliveSandboxes()
		w.mu.Lock()
		old := w.p
		w.epoch++
		w.down = true
		w.up = make(chan struct{})
		w.mu.Unlock()
		t0 := time.Now()
		kill9(old.cmd.Process.Pid)
		<-old.done
		p, err := startServe(w.s, w.env, "--stop-sessions-on-exit")
		if err != nil {
			// Nothing can go on without serve.
			t.Fatalf("restart serve after kill -9: %v", err)
		}
		r := restart{aliveBefore: alive, took: time.Since(t0)}
		m := readopted.FindStringSubmatch(p.log.String())
		if m == nil {
			t.Errorf("serve's log after the restart does not say how many sessions it re-adopted:\n%s", p.log.String())
		} else {
			r.adopted, _ = strconv.Atoi(m[1])
			r.ended, _ = strconv.Atoi(m[2])
			r.orphans, _ = strconv.Atoi(m[3])
			// A sandbox alive at the kill is adopted, or cleaned as an
			// orphan if it was still being made; never ended as dead.
			if r.adopted+r.orphans < alive {
				t.Errorf("restart after kill -9: %d sessions re-adopted and %d orphans cleaned, but %d sandboxes were alive at the kill", r.adopted, r.orphans, alive)
			}
		}
		if r.took > 5*time.Second {
			t.Logf("serve took %s to answer after its restart; its log so far:\n%s", r.took.Round(time.Millisecond), p.log.String())
		}
		w.mu.Lock()
		w.p = p
		w.logs = append(w.logs, p.log)
		w.restarts = append(w.restarts, r)
		w.down = false
		close(w.up)
		w.mu.Unlock()
		return fmt.Sprintf("kill -9 serve %d; restarted as %d in %s: %d sessions re-adopted, %d ended, %d orphans cleaned (%d sandboxes were alive)",
			old.cmd.Process.Pid, p.cmd.Process.Pid, r.took.Round(time.Millisecond), r.adopted, r.ended, r.orphans, alive)
	}
	panic("unknown chaos kind " + kind)
}

var readopted = regexp.MustCompile(`(\d+) sessions re-adopted, (\d+) ended, (\d+) orphans cleaned`)

// sessionDirs lists the session directories on home.
func sessionDirs(home string) []string {
	ents, _ := os.ReadDir(filepath.Join(home, "sessions"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// chaosClient is a load client that survives the chaos: it reconnects when
// serve goes, makes a new session when its session is reported ended, and
// re-runs its setup when its kernel's state is reported lost.
type chaosClient struct {
	*loadClient
	w         *chaosWorld
	idx       int
	connEpoch int       // the serve epoch its MCP connection was made in
	sidEpoch  int       // the serve epoch its session was made in
	uncertain bool      // a step broke in transit: x may be one ahead
	needReset bool      // the kernel's state is lost: set x again
	lastLost  time.Time // when a call last broke in transit
	// lostSinceOK says a call broke in transit since the last success.
	lostSinceOK bool
	left        []string // sessions left after being reported ended
	lat         []time.Duration
	fatal       error
}

// run makes calls attempts, each one tool call, tolerating and counting
// what the chaos causes.
func (c *chaosClient) run(calls int, progress func()) {
	for range calls {
		if err := c.ensureConn(); err != nil {
			c.fatal = err
			return
		}
		c.attempt()
		progress()
	}
}

// ensureConn connects, retrying with backoff while serve is down, for up
// to two minutes.
func (c *chaosClient) ensureConn() error {
	deadline := time.Now().Add(2 * time.Minute)
	backoff := 20 * time.Millisecond
	for c.cs == nil {
		epoch, down, up := c.w.serveState()
		err := c.connect()
		if err == nil {
			c.connEpoch = epoch
			return nil
		}
		if e2, down2, _ := c.w.serveState(); down || down2 || e2 != epoch {
			c.w.errs.add(cConnectDown, fmt.Sprintf("client %d: %v", c.idx, err))
		} else {
			c.w.errs.add(fConnect, fmt.Sprintf("client %d: %v", c.idx, err))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no connection to serve for two minutes: %v", err)
		}
		// While serve is down, wait for it to come back; otherwise
		// back off.
		if down {
			select {
			case <-up:
			case <-time.After(5 * time.Second):
			}
		} else {
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
		}
	}
	return nil
}

// attempt makes one call: a new session, the setup again, or a step.
func (c *chaosClient) attempt() {
	sid := c.sid
	setup := fmt.Sprintf("x = %d\nx", c.start)
	t0 := time.Now()
	var out execOut
	var err error
	switch {
	case sid == "":
		out, err = c.exec("", setup)
	case c.needReset:
		out, err = c.exec(sid, setup)
	default:
		out, err = c.exec(sid, "x = x + 1\nx")
	}
	d := time.Since(t0)
	if err == nil {
		if sid == "" {
			c.sid, c.sidEpoch = out.SessionID, c.w.epochNow()
			c.w.setCurrent(c.idx, c.sid)
		}
		got, perr := strconv.Atoi(out.value())
		want := c.x + 1
		if sid == "" || c.needReset {
			want = c.start
		}
		if perr != nil || (got != want && !(c.uncertain && got == want+1 && sid != "" && !c.needReset)) {
			c.w.errs.add(fWrongResult, fmt.Sprintf("client %d session %s: got %q, want %d (uncertain %v)", c.idx, c.sid, out.value(), want, c.uncertain))
			c.needReset = true
			return
		}
		c.x, c.uncertain, c.needReset, c.lostSinceOK = got, false, false, false
		c.lat = append(c.lat, d)
		return
	}
	c.judge(err, sid, t0)
}

// judge classifies a failed call and sets the client up for the next.
func (c *chaosClient) judge(err error, sid string, t0 time.Time) {
	detail := fmt.Sprintf("client %d session %s: %v", c.idx, sid, err)
	add := func(class string) { c.w.errs.add(class, detail) }
	var te *toolErr
	if errors.As(err, &te) {
		deadAt, agentKilled := c.w.agentKill(sid)
		name := te.name()
		switch {
		case te.out.ErrorCode == mcpbox.ESESSION:
			if agentKilled {
				add(cEnded)
			} else {
				add(fSessionLost)
			}
			c.leave()
		case te.out.ErrorCode == mcpbox.ECODE && (name == "KernelDied" || name == "KernelRestarted" || name == "KernelExited"):
			if !c.w.lastKernelKill(sid).IsZero() || agentKilled {
				add(cKernelLost)
			} else {
				add(fKernelLost)
			}
			c.needReset = true
		case te.out.ErrorCode == mcpbox.ECODE && name == "NameError":
			// x is gone: a fresh kernel. Fine only when the report of
			// its predecessor's death went to a call lost with serve.
			switch k := c.w.lastKernelKill(sid); {
			case !k.IsZero() && c.lastLost.After(k):
				add(cReportLost)
			case c.lostSinceOK:
				add(fStateLost)
			default:
				add(fStateSilent)
			}
			c.needReset = true
		case agentKilled && (deadAt.IsZero() || t0.Before(deadAt)):
			// The agent died under this call (it started before the
			// agent was seen dead); the next must hear that the session
			// ended.
			add(cAgentInFlight)
		case agentKilled:
			add(fAgentDead)
			c.leave()
		default:
			add(fUnclassified + " " + te.out.ErrorCode)
		}
		return
	}
	if strings.HasPrefix(err.Error(), "hang:") {
		add(fHang)
	} else if epoch, down, _ := c.w.serveState(); down || epoch != c.connEpoch {
		add(cTransport)
	} else {
		add(fTransport)
	}
	c.close()
	c.lastLost, c.lostSinceOK = time.Now(), true
	if sid != "" && !c.needReset {
		c.uncertain = true
	}
}

// leave gives up the session: the next call makes a new one.
func (c *chaosClient) leave() {
	c.left = append(c.left, c.sid)
	c.sid, c.needReset, c.uncertain = "", false, false
	c.w.setCurrent(c.idx, "")
}

// settle brings the client, with nothing else going on, to a session whose
// x it knows, within a few attempts.
func (c *chaosClient) settle() error {
	for range 5 {
		if err := c.ensureConn(); err != nil {
			return err
		}
		if c.sid != "" && !c.needReset && !c.uncertain {
			return nil
		}
		c.attempt()
	}
	return fmt.Errorf("still no known state after 5 attempts (session %q)", c.sid)
}

// TestChaosCancel is the kill of serve in miniature, without the kill: a
// client cancels execute_code calls at random moments (as a client that
// goes away does, and as serve's death does to the agent's request). The
// kernel's state must survive every cancel — the cancelled cell ran or it
// did not, so x is one of two values — and the next call must answer at
// once: neither a fresh kernel nobody was told of, nor a stall.
func TestChaosCancel(t *testing.T) {
	if !*chaos {
		t.Skip("chaos run: run it as root with `go test -run TestChaos -v -timeout 30m ./e2e/ -chaos`")
	}
	testutil.RequireRoot(t)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	bin := build(t)
	home := testutil.Home(t)
	s := &server{bin: bin, home: home, url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	p, err := startServe(s, soakEnv(home, 1), "--stop-sessions-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopServe(p, time.Minute)
		if l := waitNoLeaks(home, bin, sessionsInLog(p.log.String()), 15*time.Second); len(l) > 0 {
			t.Errorf("left behind:\n%s", strings.Join(l, "\n"))
		}
	}()
	c := &loadClient{url: s.url, start: 1000}
	if err := c.connect(); err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.create(); err != nil {
		t.Fatal(err)
	}
	const cancels = 300
	errs := newErrCounts()
	var slowest time.Duration
	for i := range cancels {
		// Up to 8 ms: about as long as the call takes, so the cancel lands
		// before, during and after the cell.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(8000))*time.Microsecond)
		c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": c.sid, "code": "x = x + 1\nx"}})
		cancel()
		t0 := time.Now()
		got, err := c.read()
		d := time.Since(t0)
		slowest = max(slowest, d)
		switch {
		case err == nil && (got == c.x || got == c.x+1):
			c.x = got
			if d > 10*time.Second {
				errs.add("FAIL: the call after a cancel stalled", fmt.Sprintf("cancel %d: %s", i, d))
			}
			continue
		case err == nil:
			errs.add("FAIL: wrong x", fmt.Sprintf("cancel %d: x = %d, want %d or %d", i, got, c.x, c.x+1))
		default:
			var te *toolErr
			class := "FAIL: " + classify(err)
			if errors.As(err, &te) && te.name() == "NameError" {
				class = "FAIL: state lost without a report (NameError)"
			}
			errs.add(class, fmt.Sprintf("cancel %d (next call took %s): %v", i, d.Round(time.Millisecond), err))
		}
		// Start again from a known x, in the same session.
		if _, err := c.exec(c.sid, fmt.Sprintf("x = %d", c.start)); err != nil {
			t.Fatalf("after cancel %d: set x again: %v", i, err)
		}
		c.x = c.start
	}
	t.Logf("seed %d: %d cancelled calls; slowest next call %s; errors: %s", seed, cancels, slowest.Round(time.Millisecond), errs)
	if errs.total() > 0 {
		t.Errorf("the kernel's state or its next call did not survive a cancel:%s", errs.detail())
	}
}
