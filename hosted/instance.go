package hosted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// Crash handling: a server that exits is started again at its next use,
// after a wait that doubles with each crash in a row (from crashBackoff
// up to maxCrashBackoff). After maxCrashes crashes in a row it is reported
// as crashing, with the tail of its stderr, and not started again until
// maxCrashBackoff has passed since the last one. A call that succeeds, or
// a run longer than stableRun, ends the streak.
const (
	crashBackoff    = 250 * time.Millisecond
	maxCrashBackoff = 30 * time.Second
	maxCrashes      = 5
	stableRun       = time.Minute
)

// instance is one hosted server for one sandbox owner (an owner, or
// sharedOwner for a shared server). It starts on first use, stays warm
// until idle, and is started again after a crash.
type instance struct {
	h     *Hosts
	name  string
	owner string // the sandbox's owner

	mu       sync.Mutex
	run      *running      // the live server, or nil
	starting chan struct{} // closed when the start under way ends
	startErr error
	users    int // calls in flight
	lastUsed time.Time
	idle     *time.Timer
	catalog  Catalog // as last listed
	toolsKey string  // the runKey of the definition that listed it
	crashes  int
	lastEnd  time.Time
	lastWhy  string // how the last crash went, with stderr
	gone     bool   // stopped for good (server removed, Hosts closed)
}

// running is one start of a server: its sandbox, process and MCP client.
type running struct {
	def       Server
	defKey    string
	sessionID string
	proc      *manager.Stdio
	cs        *mcp.ClientSession
	stderr    *tail
	started   time.Time
	stopping  atomic.Bool
	ended     chan struct{} // closed when the process ended
	// startDone is closed when start returns: cs and started are set
	// then (started stays zero when the start failed).
	startDone chan struct{}
	endWhy    string
	progress  sync.Map // progress token → func(Progress)
	// progressBarrier keeps progress ahead of results (transport.go).
	progressBarrier *barrier
	// relisting serialises relists, so that an older listing never
	// replaces a newer one.
	relisting sync.Mutex
}

// Progress is a progress notification: of the install and start (Total
// 0, Message saying what happens), or of the server's own tool call.
type Progress struct {
	Progress, Total float64
	Message         string
}

// acquire returns the live server, starting it when needed, and counts
// the caller as a user until release.
func (in *instance) acquire(ctx context.Context, def Server, onProgress func(Progress)) (*running, error) {
	for {
		in.mu.Lock()
		if in.gone {
			in.mu.Unlock()
			return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "hosted server %s was removed", in.name)
		}
		if r := in.run; r != nil {
			select {
			case <-r.ended:
				// It ended between its start and now: clean up, start anew.
				in.run = nil
				go in.stopRunning(r)
			default:
				if r.defKey != def.runKey() {
					// The definition changed: the next start uses the new one.
					in.run = nil
					in.mu.Unlock()
					in.h.log.Info("hosted server definition changed; restarting", "server", in.name)
					in.stopRunning(r)
					continue
				}
				in.users++
				in.mu.Unlock()
				return r, nil
			}
		}
		if in.starting != nil {
			wait := in.starting
			in.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			in.mu.Lock()
			err := in.startErr
			in.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		// Crashing: wait out the backoff, or report it.
		if in.crashes > 0 {
			since := time.Since(in.lastEnd)
			if in.crashes >= maxCrashes && since < maxCrashBackoff {
				err := mcpbox.Errorf(mcpbox.EUNAVAILABLE, "hosted server %s keeps crashing: it ended %d times in a row, last: %s", in.name, in.crashes, in.lastWhy).
					With("server", in.name).With("crashes", in.crashes).
					WithSuggestion(fmt.Sprintf("fix its command or install commands (`mcpbox server list`); it is tried again %s after its last crash", maxCrashBackoff))
				in.mu.Unlock()
				return nil, err
			}
			delay := min(crashBackoff<<(min(in.crashes, 10)-1), maxCrashBackoff)
			if since < delay {
				in.mu.Unlock()
				select {
				case <-time.After(delay - since):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				continue
			}
		}
		done := make(chan struct{})
		in.starting, in.startErr = done, nil
		in.mu.Unlock()

		// The start belongs to the instance, not to this caller: a caller
		// that gives up must not leave a half-started server behind for
		// the next one, so it runs to its end in its own context.
		sctx := context.WithoutCancel(ctx)
		r, err := in.start(sctx, def, onProgress)
		in.mu.Lock()
		in.starting = nil
		in.startErr = err
		if err == nil {
			if in.gone {
				in.mu.Unlock()
				close(done)
				in.stopRunning(r)
				return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "hosted server %s was removed", in.name)
			}
			in.run = r
		} else if mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			in.crashes++
			in.lastEnd = time.Now()
			in.lastWhy = err.Error()
		}
		in.mu.Unlock()
		close(done)
		if err != nil {
			return nil, err
		}
		in.h.changed(Change{Server: in.name, Owner: in.owner, Tools: true})
	}
}

// release ends a use and arms the idle timer. ok says the call got an
// answer from the server: the crash streak is over.
func (in *instance) release(r *running, ok bool, idle time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.users--
	in.lastUsed = time.Now()
	if ok {
		in.crashes = 0
	}
	if in.users == 0 && in.run == r {
		if in.idle != nil {
			in.idle.Stop()
		}
		in.idle = time.AfterFunc(idle, func() { in.stopIdle(r, idle) })
	}
}

// stopIdle stops r if it has not been used for idle.
func (in *instance) stopIdle(r *running, idle time.Duration) {
	in.mu.Lock()
	if in.run != r || in.users > 0 || time.Since(in.lastUsed) < idle {
		in.mu.Unlock()
		return
	}
	in.run = nil
	in.mu.Unlock()
	in.h.log.Info("hosted server idle; stopping it", "server", in.name, "owner", in.owner, "idle", idle)
	in.stopRunning(r)
}

// stop stops the live server, if any; gone forbids starting it again.
func (in *instance) stop(gone bool) {
	in.mu.Lock()
	r := in.run
	in.run = nil
	if gone {
		in.gone = true
	}
	if in.idle != nil {
		in.idle.Stop()
	}
	in.mu.Unlock()
	if r != nil {
		in.stopRunning(r)
	}
}

// stopRunning ends r: its MCP session, its process and its sandbox.
func (in *instance) stopRunning(r *running) {
	r.stopping.Store(true)
	if r.cs != nil {
		r.cs.Close()
	}
	r.proc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.h.opts.Manager.Stop(ctx, in.owner, r.sessionID); err != nil && mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		in.h.log.Warn("stop a hosted server's session", "server", in.name, "session", r.sessionID, "err", err)
	}
	in.mu.Lock()
	gone := in.gone
	in.mu.Unlock()
	if !gone {
		in.h.warmFor(ctx, in.name)
	}
}

// ended is told when r's process ended or its stream broke. Unless mcpbox
// stopped it, that is a crash.
func (in *instance) ended(r *running, end *manager.ProcessEnd, err error) {
	why := err.Error()
	if st := strings.TrimSpace(r.stderr.String()); st != "" {
		why += "; its stderr ends with:\n" + st
	}
	r.endWhy = why
	close(r.ended)
	if r.stopping.Load() {
		return
	}
	in.mu.Lock()
	if in.run != r {
		// Still starting (the start reports its own failure), or
		// already replaced.
		in.mu.Unlock()
		return
	}
	in.run = nil
	if s, gerr := in.h.opts.Manager.Get(context.Background(), in.owner, r.sessionID); gerr != nil || s.State != mcpbox.SessionRunning {
		// Its session ended (stopped, expired, mcpbox shutting down):
		// not the server's fault. The next use starts it in a new one.
		in.mu.Unlock()
		in.h.log.Info("hosted server's session ended", "server", in.name, "owner", in.owner, "session", r.sessionID)
		go in.stopRunning(r)
		return
	}
	if time.Since(r.started) > stableRun {
		in.crashes = 0
	}
	in.crashes++
	in.lastEnd = time.Now()
	in.lastWhy = why
	n := in.crashes
	in.mu.Unlock()
	in.h.log.Warn("hosted server ended unexpectedly", "server", in.name, "owner", in.owner, "crashes_in_a_row", n, "why", err)
	go in.stopRunning(r)
}

// start makes a sandbox, runs the install commands, starts the server and
// does the MCP handshake, then lists its tools (and prompts and
// resources).
func (in *instance) start(ctx context.Context, def Server, onProgress func(Progress)) (r *running, err error) {
	h := in.h
	step := 0.0
	say := func(format string, args ...any) {
		if onProgress != nil {
			// Start-up messages stay below 1, so a server's own progress
			// (usually counted from 1) still increases.
			step = step + (1-step)/2
			onProgress(Progress{Progress: step, Message: fmt.Sprintf(format, args...)})
		}
	}
	var vols []mcpbox.Volume
	for _, v := range def.Volumes {
		pv, err := mcpbox.ParseVolume(v)
		if err != nil {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "server %s: volume %q: %v", def.Name, v, err)
		}
		vols = append(vols, pv)
	}
	// An install already committed as a template is not run again.
	template, cached, cache := def.Template, false, ""
	if len(def.InstallCommands) > 0 && h.opts.Templates != nil {
		cache = cacheTemplate(def)
		if h.opts.Templates.Exists(ctx, cache) {
			template, cached = cache, true
			say("install commands cached as template %s", cache)
		}
	}
	say("starting a sandbox for %s", def.Name)
	begin := time.Now()
	s, err := h.opts.Manager.Create(ctx, in.owner, manager.CreateRequest{
		Template: template, Network: def.Network, Volumes: vols,
		Metadata: map[string]string{"mcpbox.hosted": def.Name},
		// The instance stops its sandbox when idle; the session's own
		// idle timeout is the backstop if this process cannot.
		IdleTimeout: def.Idle() + time.Minute,
		Ephemeral:   true,
		// The server, not a Python kernel, is what this sandbox runs.
		NoKernel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("hosted server %s: %w", def.Name, err)
	}
	r = &running{def: def.clone(), defKey: def.runKey(), sessionID: s.ID, stderr: newTail(stderrTailBytes), ended: make(chan struct{}), startDone: make(chan struct{}),
		progressBarrier: newBarrier()}
	run := r // r is nil once a failed start returns
	defer func() {
		close(run.startDone)
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			h.opts.Manager.Stop(ctx, in.owner, s.ID)
			cancel()
		}
	}()
	if !cached {
		if err := in.install(ctx, def, s.ID, say); err != nil {
			return nil, err
		}
		if cache != "" {
			// The next start skips the install. A failed commit costs
			// only that: this start goes on.
			if err := h.opts.Templates.Commit(ctx, s.ID, cache, func(msg string) { say("%s", msg) }); err != nil {
				h.log.Warn("hosted server: cache the install as a template", "server", def.Name, "template", cache, "err", err)
			} else {
				say("install commands cached as template %s", cache)
			}
		}
	}
	say("starting %s", def.Name)
	r.proc, err = h.opts.Manager.StartStdio(ctx, in.owner, s.ID, manager.StdioRequest{Args: shell(def.Command), Env: def.Env})
	if err != nil {
		return nil, fmt.Errorf("hosted server %s: start: %w", def.Name, err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpbox", Version: mcpbox.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			go in.relist(r)
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			go in.relist(r)
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			go in.relist(r)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			defer r.progressBarrier.done()
			if f, ok := r.progress.Load(fmt.Sprint(req.Params.ProgressToken)); ok {
				f.(func(Progress))(Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
			}
		},
		Capabilities: &mcp.ClientCapabilities{},
	})
	t := &stdioTransport{p: r.proc, stderr: r.stderr, log: h.log, progress: r.progressBarrier,
		onEnd: func(end *manager.ProcessEnd, err error) { in.ended(r, end, err) }}
	hctx, cancel := context.WithTimeout(ctx, h.opts.HandshakeTimeout)
	defer cancel()
	// 2025-11-25 is the newest revision stdio servers speak; the SDK
	// would otherwise first probe with 2026-07-28's server/discover.
	r.cs, err = client.Connect(hctx, t, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		r.stopping.Store(true)
		r.proc.Close()
		return nil, in.startFailure(r, "the MCP handshake failed", hctx, err)
	}
	cat, err := in.listCatalog(hctx, r.cs)
	if err != nil {
		r.stopping.Store(true)
		r.cs.Close()
		return nil, in.startFailure(r, "tools/list failed", hctx, err)
	}
	in.mu.Lock()
	in.catalog, in.toolsKey = cat, r.defKey
	in.mu.Unlock()
	r.started = time.Now()
	h.log.Info("hosted server started", "server", def.Name, "owner", in.owner, "session", s.ID,
		"protocol", r.cs.InitializeResult().ProtocolVersion, "tools", len(cat.Tools), "prompts", len(cat.Prompts),
		"resources", len(cat.Resources), "took", time.Since(begin))
	return r, nil
}

// startFailure explains a start that got no MCP answer, with the server's
// stderr.
func (in *instance) startFailure(r *running, what string, ctx context.Context, err error) error {
	msg := fmt.Sprintf("hosted server %s: %s: %v", in.name, what, err)
	code := mcpbox.EUNAVAILABLE
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = fmt.Sprintf("hosted server %s did not answer the MCP handshake within %s", in.name, in.h.opts.HandshakeTimeout)
		code = mcpbox.ETIMEOUT
	}
	// Give the end event (and the last stderr) a moment to arrive.
	select {
	case <-r.ended:
	case <-time.After(500 * time.Millisecond):
	}
	if st := strings.TrimSpace(r.stderr.String()); st != "" {
		msg += "; its stderr ends with:\n" + st
	}
	return mcpbox.Errorf(code, "%s", msg).With("server", in.name).
		WithSuggestion("check that its command starts an MCP server speaking stdio: run it with `mcpbox run -l shell`")
}

// shell runs a command line with /bin/sh, which every template has
// (bash is not in every image).
func shell(line string) []string { return []string{"/bin/sh", "-c", line} }

// cacheTemplate names the template an install is cached as: the server's
// name (made a valid template name) and the hash of what affects the
// install, so a changed definition installs again.
func cacheTemplate(def Server) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, def.Name)
	if len(name) > 30 {
		name = name[:30]
	}
	return "hosted-" + name + "-" + def.InstallKey()
}

// install runs the definition's install commands in the new sandbox.
func (in *instance) install(ctx context.Context, def Server, id string, say func(string, ...any)) error {
	for i, c := range def.InstallCommands {
		say("install %d/%d: %s", i+1, len(def.InstallCommands), c)
		var last strings.Builder
		res, err := in.h.opts.Manager.RunCommand(ctx, in.owner, id, manager.CommandRequest{Args: shell(c), Env: def.Env,
			Timeout: in.h.opts.InstallTimeout}, func(_ bool, b []byte) {
			for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
				if line = strings.TrimSpace(line); line != "" {
					say("install: %s", truncate(line, 200))
				}
			}
		})
		if err != nil {
			return fmt.Errorf("hosted server %s: install command %d (%s): %w", def.Name, i+1, c, err)
		}
		if res.ExitCode != 0 {
			last.Write(res.Stdout)
			last.Write(res.Stderr)
			return mcpbox.Errorf(mcpbox.ECOMMAND, "hosted server %s: install command %d (%s) failed: %s; output ends with:\n%s",
				def.Name, i+1, c, res.Status, tailString(last.String(), 2000)).With("server", def.Name).
				WithSuggestion("fix the install command with `mcpbox server add` (it replaces the definition)")
		}
	}
	return nil
}

// relist lists r's tools, prompts and resources again after the server
// said one of them changed.
func (in *instance) relist(r *running) {
	// A server may say its lists changed during the handshake, before
	// start has its session; start's own listing comes after that.
	<-r.startDone
	if r.started.IsZero() {
		return
	}
	r.relisting.Lock()
	defer r.relisting.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), in.h.opts.HandshakeTimeout)
	defer cancel()
	cat, err := in.listCatalog(ctx, r.cs)
	if err != nil {
		in.h.log.Warn("hosted server: list tools after list_changed", "server", in.name, "err", err)
		return
	}
	in.mu.Lock()
	if in.run != r {
		in.mu.Unlock()
		return
	}
	in.catalog = cat
	in.mu.Unlock()
	in.h.changed(Change{Server: in.name, Owner: in.owner, Tools: true})
}

// call runs one tool call on r, passing progress through when asked.
func (in *instance) call(ctx context.Context, r *running, tool string, args json.RawMessage, onProgress func(Progress)) (*mcp.CallToolResult, error) {
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	if onProgress != nil {
		// A token of mcpbox's own: callers of a shared server never see
		// each other's, and a caller cannot pick one that is not its.
		tok := mcpbox.NewID()
		r.progress.Store(tok, onProgress)
		defer r.progress.Delete(tok)
		params.SetProgressToken(tok)
	}
	res, err := r.cs.CallTool(ctx, params)
	if err != nil {
		return nil, in.requestErr(ctx, r, err)
	}
	return res, nil
}

// requestErr explains a request to r that got no result.
func (in *instance) requestErr(ctx context.Context, r *running, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return err // the server's own answer
	}
	select {
	case <-r.ended:
		return mcpbox.Errorf(mcpbox.EUNAVAILABLE, "hosted server %s ended during the call: %s", in.name, r.endWhy).
			With("server", in.name).WithSuggestion("call it again: the server is restarted")
	case <-time.After(100 * time.Millisecond):
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
