package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

// The soak and the chaos run are long: they run only when asked for, never
// in `make test`.
var (
	soak        = flag.Bool("soak", false, "run TestSoak: go test -run TestSoak -v -timeout 60m ./e2e/ -soak (as root; the package comes before -soak, which go test does not know)")
	soakClients = flag.Int("soak-clients", 32, "TestSoak: concurrent clients, each with its own MCP connection and session")
	soakCalls   = flag.Int("soak-calls", 10000, "TestSoak: calls per client")
	soakWarm    = flag.Int("soak-warm", 100, "TestSoak: warm-up calls per client before the baseline RSS is taken")
)

// callTimeout bounds every call of the soak and the chaos run: a loaded
// 2-core host answers execute_code in milliseconds, so a call still open
// after a minute is a hang, and a hang is a failure.
const callTimeout = time.Minute

// rssBound is how far serve's RSS may grow from its post-warm-up value over
// the whole soak: to twice that value or by 64 MiB, whichever is more. The
// warm-up has already brought the heap (GOGC=400, see tuneGC) and every
// connection and session to their steady size, so what is left to grow is a
// leak; 64 MiB over 320,000 calls is about 200 bytes a call, small enough to
// catch a per-call leak and large enough for the collector's slack.
func rssBound(start int64) int64 { return max(2*start, start+64<<20) }

// TestSoak runs many clients, each on its own Streamable HTTP connection and
// session, calling execute_code as fast as they can; every call must succeed
// with the right value, serve's memory must stay flat, and once the sessions
// and serve are stopped nothing may be left on the host.
func TestSoak(t *testing.T) {
	if !*soak {
		t.Skip("long soak: run it as root with `go test -run TestSoak -v -timeout 60m ./e2e/ -soak` (flags go test does not know come after the package; -soak-calls N shortens it)")
	}
	testutil.RequireRoot(t)
	bin := build(t)
	home := testutil.Home(t)
	s := &server{bin: bin, home: home, url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	clients, calls := *soakClients, *soakCalls
	p, err := startServe(s, soakEnv(home, clients), "--stop-sessions-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopServe(p, time.Minute)
		}
		if t.Failed() {
			t.Logf("mcpbox serve log (tail):\n%s", tail(p.log.String(), 8000))
		}
	})
	pid := p.cmd.Process.Pid
	t.Logf("serve pid %d, RSS at start (no sessions): %s", pid, mib(rss(pid)))

	// Connect and make one session per client, each with its own x.
	lc := make([]*loadClient, clients)
	for i := range lc {
		c := &loadClient{url: s.url, start: 1000 * (i + 1)}
		if err := c.connect(); err != nil {
			t.Fatalf("client %d: connect: %v", i, err)
		}
		defer c.close()
		if err := c.create(); err != nil {
			t.Fatalf("client %d: create a session: %v", i, err)
		}
		lc[i] = c
	}
	// Warm-up: the heap, the connections and every kernel reach their
	// steady size before the baseline is taken.
	var wg sync.WaitGroup
	var warmErr atomic.Value
	for _, c := range lc {
		wg.Go(func() {
			for range *soakWarm {
				if _, err := c.step(); err != nil {
					warmErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := warmErr.Load(); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	rss0, fds0 := rss(pid), fdCount(pid)
	t.Logf("after warm-up (%d clients × %d calls): RSS %s, %d open descriptors", clients, *soakWarm, mib(rss0), fds0)

	// The load. The call that completes each tenth of the total samples
	// serve's RSS: the series comes from the load itself, not a timer.
	total := int64(clients * calls)
	tenth := max(total/10, 1)
	var done atomic.Int64
	series := make([]int64, 11)
	series[0] = rss0
	lat := make([][]time.Duration, clients)
	errs := newErrCounts()
	start := time.Now()
	for i, c := range lc {
		lat[i] = make([]time.Duration, 0, calls)
		wg.Go(func() {
			for range calls {
				d, err := c.step()
				if err != nil {
					errs.add(classify(err), fmt.Sprintf("client %d: %v", i, err))
				} else {
					lat[i] = append(lat[i], d)
				}
				if n := done.Add(1); n%tenth == 0 && n/tenth <= 10 {
					series[n/tenth] = rss(pid)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	rssEnd, fdsEnd := rss(pid), fdCount(pid)

	all := slices.Concat(lat...)
	slices.Sort(all)
	t.Logf("%d calls (%d clients × %d) in %s: %.0f calls/s, p50 %s, p99 %s, max %s",
		total, clients, calls, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(),
		pct(all, 50), pct(all, 99), pct(all, 100))
	t.Logf("errors: %s", errs)
	var rs []string
	for i, v := range series {
		rs = append(rs, fmt.Sprintf("%d%%=%s", 10*i, mib(v)))
	}
	t.Logf("serve RSS: %s; end %s (bound %s); descriptors %d → %d", strings.Join(rs, " "), mib(rssEnd), mib(rssBound(rss0)), fds0, fdsEnd)
	if n := errs.total(); n > 0 {
		t.Errorf("%d of %d calls failed: %s", n, total, errs.detail())
	}
	if rssEnd > rssBound(rss0) {
		t.Errorf("serve grew from %s after warm-up to %s after %d calls, past the bound of %s: a leak", mib(rss0), mib(rssEnd), total, mib(rssBound(rss0)))
	}
	// Descriptors: one connection per client and a few per session; none
	// may pile up per call.
	if fdsEnd > fds0+clients {
		t.Errorf("serve's open descriptors went from %d to %d over the soak", fds0, fdsEnd)
	}
	// Every kernel still holds its own x: no state was mixed or lost.
	for i, c := range lc {
		if got, err := c.read(); err != nil || got != c.x {
			t.Errorf("client %d: x = %d (%v) at the end, want %d", i, got, err, c.x)
		}
	}

	// Stop the sessions as a client would, then serve; nothing may be
	// left of either.
	ids := map[string]bool{}
	for i, c := range lc {
		ids[c.sid] = true
		if err := c.stopSession(); err != nil {
			t.Errorf("client %d: stop_session %s: %v", i, c.sid, err)
		}
		c.close()
	}
	clean := stopServe(p, time.Minute)
	stopped = true
	if !clean {
		t.Errorf("serve did not exit within a minute of SIGINT; killed")
	}
	for id := range sessionsInLog(p.log.String()) {
		ids[id] = true
	}
	if l := waitNoLeaks(home, bin, ids, 15*time.Second); len(l) > 0 {
		t.Errorf("left behind after the sessions and serve stopped:\n%s", strings.Join(l, "\n"))
	} else {
		t.Logf("leak check: no process, mount, cgroup, session directory or live record left of %d sessions", len(ids))
	}
}

// soakEnv is serve's environment for a load of n clients: every client is
// the local owner, so the owner may hold all their sessions (and as many
// again for the chaos run's replacements), and sessions outlive the run.
func soakEnv(home string, n int) []string {
	return []string{"MCPBOX_HOME=" + home,
		"MCPBOX_MAX_SESSIONS=" + strconv.Itoa(4*n+16),
		"MCPBOX_MAX_SESSIONS_PER_OWNER=" + strconv.Itoa(4*n+16),
		"MCPBOX_DEFAULT_TTL=6h", "MCPBOX_IDLE_TIMEOUT=1h"}
}

// startServe starts serve on s's home and port and waits, up to a minute,
// until it answers /healthz. Unlike server.start it returns an error
// rather than failing the test, so the chaos run can call it from any
// goroutine, and it allows for recovery of many sessions at start.
func startServe(s *server, env []string, args ...string) (*proc, error) {
	port := s.url[strings.LastIndex(s.url, ":")+1:]
	cmd := exec.Command(s.bin, append([]string{"serve", "--port", port}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); close(p.done) }()
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := hc.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("mcpbox serve exited at start:\n%s", p.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-p.done
			return nil, fmt.Errorf("mcpbox serve did not answer /healthz within a minute: %v\n%s", err, p.log.String())
		}
	}
}

// stopServe interrupts serve and waits up to limit for it to exit; past
// that it kills it and reports false.
func stopServe(p *proc, limit time.Duration) bool {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return true
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// loadClient is one go-sdk client on its own MCP connection (and HTTP
// connection pool), using one session whose kernel holds x.
type loadClient struct {
	url   string
	cs    *mcp.ClientSession
	start int    // the value x is set to in a new or reset kernel
	sid   string // the session in use, "" for none
	x     int    // what x holds in the session's kernel
}

func (c *loadClient) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "soak", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.url + "/mcp", DisableStandaloneSSE: true, HTTPClient: hc}, nil)
	if err != nil {
		return err
	}
	c.cs = cs
	return nil
}

func (c *loadClient) close() {
	if c.cs != nil {
		c.cs.Close()
		c.cs = nil
	}
}

// execOut is what a client reads of execute_code's structured result,
// success or failure.
type execOut struct {
	SessionID string `json:"session_id"`
	Results   []struct {
		Text string `json:"text"`
	} `json:"results"`
	Error *struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"error"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
}

// toolErr is a call that reached the server and failed there (isError).
type toolErr struct {
	out  execOut
	text string
}

func (e *toolErr) Error() string { return e.text }

// name is the exception's name for a code error, else "".
func (e *toolErr) name() string {
	if e.out.Error != nil {
		return e.out.Error.Name
	}
	return ""
}

// resultErr is a call that succeeded with the wrong value.
type resultErr struct{ got, want string }

func (e *resultErr) Error() string { return fmt.Sprintf("result %q, want %q", e.got, e.want) }

// exec runs code (in sid, or a new session when sid is "") and returns its
// structured result; a failure is a *toolErr, a protocol or transport
// error is returned as it comes.
func (c *loadClient) exec(sid, code string) (execOut, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	args := map[string]any{"code": code}
	if sid != "" {
		args["session_id"] = sid
	}
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: args})
	if err != nil {
		if ctx.Err() != nil {
			return execOut{}, fmt.Errorf("hang: no answer within %s: %w", callTimeout, err)
		}
		return execOut{}, err
	}
	var out execOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("structured content %s: %v", b, err)
	}
	if res.IsError {
		text := out.ErrorCode + ": " + out.Message
		if out.Error != nil {
			text += " (" + out.Error.Name + ": " + out.Error.Value + ")"
		}
		return out, &toolErr{out: out, text: text}
	}
	return out, nil
}

// value is the single result an execution returned, as text.
func (o execOut) value() string {
	if len(o.Results) != 1 {
		return fmt.Sprintf("%d results", len(o.Results))
	}
	return o.Results[0].Text
}

// create starts a session whose x is start.
func (c *loadClient) create() error {
	out, err := c.exec("", fmt.Sprintf("x = %d\nx", c.start))
	if err != nil {
		return err
	}
	if out.SessionID == "" {
		return errors.New("no session_id in the result")
	}
	c.sid = out.SessionID
	if v := out.value(); v != strconv.Itoa(c.start) {
		return &resultErr{v, strconv.Itoa(c.start)}
	}
	c.x = c.start
	return nil
}

// step adds one to x in the session's kernel and checks the value that
// comes back: a lost or shared state gives a wrong one.
func (c *loadClient) step() (time.Duration, error) {
	t0 := time.Now()
	out, err := c.exec(c.sid, "x = x + 1\nx")
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	want := strconv.Itoa(c.x + 1)
	if v := out.value(); v != want {
		return d, &resultErr{v, want}
	}
	c.x++
	return d, nil
}

// read returns x without changing it.
func (c *loadClient) read() (int, error) {
	out, err := c.exec(c.sid, "x")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out.value())
}

func (c *loadClient) stopSession() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "stop_session", Arguments: map[string]any{"session_id": c.sid}})
	if err == nil && res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		err = fmt.Errorf("%s", b)
	}
	return err
}

// classify names a soak error's class for the tally: in the soak every
// class is a failure; the names say where to look.
func classify(err error) string {
	var te *toolErr
	var re *resultErr
	switch {
	case errors.As(err, &re):
		return "wrong-result"
	case errors.As(err, &te):
		if n := te.name(); n != "" {
			return te.out.ErrorCode + "/" + n
		}
		return te.out.ErrorCode
	case strings.HasPrefix(err.Error(), "hang:"):
		return "hang"
	}
	return "transport"
}

// errCounts tallies errors by class and keeps the first few of each.
type errCounts struct {
	mu    sync.Mutex
	n     map[string]int
	first map[string][]string
}

func newErrCounts() *errCounts {
	return &errCounts{n: map[string]int{}, first: map[string][]string{}}
}

func (e *errCounts) add(class, detail string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[class]++
	if len(e.first[class]) < 3 {
		e.first[class] = append(e.first[class], detail)
	}
}

func (e *errCounts) get(class string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[class]
}

func (e *errCounts) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.n {
		n += v
	}
	return n
}

// String is "class=count …" in class order, or "none".
func (e *errCounts) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.n) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(e.n)) {
		out = append(out, fmt.Sprintf("%s=%d", k, e.n[k]))
	}
	return strings.Join(out, " ")
}

// detail is the first few errors of every class.
func (e *errCounts) detail() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(e.first)) {
		fmt.Fprintf(&b, "\n%s (%d):", k, e.n[k])
		for _, d := range e.first[k] {
			fmt.Fprintf(&b, "\n  %s", d)
		}
	}
	return b.String()
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p/100)].Round(10 * time.Microsecond)
}

// rss is a process's resident set in bytes (VmRSS), 0 when unknown.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func fdCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var sessionInLog = regexp.MustCompile(`session=([a-z0-9]{20})\b`)

// sessionsInLog is every session id a serve log names: the ones clients
// never learnt of (made while serve was killed) included.
func sessionsInLog(log string) map[string]bool {
	ids := map[string]bool{}
	for _, m := range sessionInLog.FindAllStringSubmatch(log, -1) {
		ids[m[1]] = true
	}
	return ids
}

// procStat is what the leak check and the chaos run read of
// /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	state     byte
	comm      string
	start     uint64 // clock ticks since boot
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// comm is in parentheses and may hold spaces or parentheses itself.
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return procStat{}, fmt.Errorf("malformed stat of %d", pid)
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("malformed stat of %d", pid)
	}
	st := procStat{pid: pid, comm: string(b[i+1 : j]), state: f[0][0]}
	st.ppid, _ = strconv.Atoi(f[1])
	st.start, _ = strconv.ParseUint(f[19], 10, 64)
	return st, nil
}

// allPIDs lists the host's processes.
func allPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// waitNoLeaks checks, until nothing is found or limit passes, that nothing
// of mcpbox on home is left: processes take a moment to be reaped after a
// kill. It returns what is still there.
func waitNoLeaks(home, bin string, ids map[string]bool, limit time.Duration) []string {
	deadline := time.Now().Add(limit)
	for {
		l := findLeaks(home, bin, ids)
		if len(l) == 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// findLeaks looks on the host for what serve on home and the sandboxes ids
// may have left: a process running bin, naming home, or in one of their
// cgroups (the sandbox's PID 1 runs "mcpbox agent --sandbox-init", its kernels
// python3: the cgroup is what ties them to a session); a mount naming home
// or a session; a cgroup directory of a session; a directory under
// $HOME/sessions; a record the store still counts as live.
func findLeaks(home, bin string, ids map[string]bool) []string {
	var leaks []string
	self := os.Getpid()
	for _, pid := range allPIDs() {
		if pid == self {
			continue
		}
		dir := fmt.Sprintf("/proc/%d", pid)
		st, err := readStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		cmd := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		exe, _ := os.Readlink(dir + "/exe")
		cg, _ := os.ReadFile(dir + "/cgroup")
		why := ""
		switch {
		case exe == bin || exe == bin+" (deleted)":
			why = "runs the binary under test"
		case containsPath(cmd, home):
			why = "names the test home"
		default:
			for id := range ids {
				if bytes.Contains(cg, []byte("/mcpbox/"+id)) {
					why = "in the cgroup of session " + id
					break
				}
			}
		}
		if why == "" {
			continue
		}
		if len(cmd) > 120 {
			cmd = cmd[:120] + "…"
		}
		leaks = append(leaks, fmt.Sprintf("process %d (%s, state %c, parent %d) %s: %s", pid, st.comm, st.state, st.ppid, why, cmd))
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for line := range strings.Lines(string(mi)) {
			hit := containsPath(line, home)
			for id := range ids {
				hit = hit || strings.Contains(line, id)
			}
			if hit {
				leaks = append(leaks, "mount: "+strings.TrimSpace(line))
			}
		}
	}
	for id := range ids {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/mcpbox/" + id)
		for _, d := range dirs {
			leaks = append(leaks, "cgroup: "+d)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(home, "sessions")); err == nil {
		for _, e := range ents {
			leaks = append(leaks, "session directory: "+filepath.Join(home, "sessions", e.Name()))
		}
	}
	if st, err := sqlite.Open(filepath.Join(home, "mcpbox.db")); err == nil {
		recs, err := st.ListSessions(context.Background(), mcpbox.SessionFilter{States: mcpbox.LiveStates})
		if err != nil {
			leaks = append(leaks, "store: "+err.Error())
		}
		for _, r := range recs {
			leaks = append(leaks, fmt.Sprintf("live record: session %s is %s", r.ID, r.State))
		}
		st.Close()
	}
	return leaks
}

// containsPath reports whether s names dir or a path beneath it, and not
// merely a longer name that starts the same (another test's home).
func containsPath(s, dir string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], dir)
		if j < 0 {
			return false
		}
		end := i + j + len(dir)
		if end == len(s) || s[end] == '/' || s[end] == ' ' || s[end] == '\n' {
			return true
		}
		i = end
	}
}

// agentPID is the host pid of session id's sandbox agent (its PID 1), from
// sandbox.json, or 0 when it is not running.
func agentPID(home, id string) int {
	b, err := os.ReadFile(filepath.Join(home, "sessions", id, "sandbox.json"))
	if err != nil {
		return 0
	}
	var st struct {
		PID       int    `json:"pid"`
		StartTime uint64 `json:"start_time"`
	}
	if json.Unmarshal(b, &st) != nil || st.PID <= 0 {
		return 0
	}
	ps, err := readStat(st.PID)
	if err != nil || ps.start != st.StartTime || ps.state == 'Z' {
		return 0
	}
	return st.PID
}

// waitGone waits until pid has exited (gone or a zombie, whose
// descriptors are closed): the moment its socket stops answering.
func waitGone(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		st, err := readStat(pid)
		if err != nil || st.state == 'Z' || st.state == 'X' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill9 sends SIGKILL, ignoring a process already gone.
func kill9(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}
