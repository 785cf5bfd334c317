// Package process implements envd's process.Process service: it starts
// processes in the sandbox, streams their output as it is produced, and
// lets callers attach, send input and signals, and list what runs.
//
// Every process gets its own process group, so a signal or a timeout
// reaches everything it started, and an oom_score_adj above the agent's,
// so the kernel's OOM killer picks user code before PID 1. Output is fanned
// out to every attached stream; a slow stream slows the process (its pipe
// fills) rather than losing output, and a stream that goes away stops
// receiving at once. Every byte the process wrote reaches every attached
// stream before its end event.
//
// A process started with a tag is also recorded, attached or not: the
// last TaggedOutputBytes of its stdout and stderr (with counts of what was
// dropped) and its end, kept for TaggedRetention after it ends. Output and
// Forget serve these records, so any caller, not only the one that
// started a background command, can read it by its tag. Tags are unique
// among running processes.
//
// The deadline of a Start request (Connect-Timeout-Ms) is the process's
// timeout: when it passes, the process group is killed, whether or not the
// client is still attached (the client usually cancels at its own deadline
// a moment before the agent's, so the stream ending cannot be the trigger).
// A client that disconnects before then leaves the process running: it can
// attach again with Connect, by pid or tag.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agent/reaper"
	"github.com/mcpbox/mcpbox/gen/processpb"
	"github.com/mcpbox/mcpbox/gen/processpb/processpbconnect"
)

// Options configure a Service. The zero value runs processes as the
// agent's own user with an empty environment in "/".
type Options struct {
	// Uid and Gid are the identity processes run as, when it differs from
	// the agent's own.
	Uid, Gid uint32
	// Env is the base environment; a request's envs are added on top.
	// Nothing else from the agent's environment reaches a process.
	Env map[string]string
	// DefaultCwd is where a process starts when the request names no cwd.
	DefaultCwd string
	// KeepaliveInterval is how often an idle stream gets a keepalive
	// event; default 50s, overridden per stream by the request header
	// Keepalive-Ping-Interval (seconds), as envd does.
	KeepaliveInterval time.Duration
	// OOMScoreAdj is written to /proc/<pid>/oom_score_adj of every
	// process right after it starts; default reaper.ChildOOMScoreAdj.
	OOMScoreAdj int
	// TaggedOutputBytes is how much of each output stream of a tagged
	// process is kept (the last bytes); default 1 MiB.
	TaggedOutputBytes int
	// TaggedRetention is how long the record of a tagged process is kept
	// after it ends; default 10 minutes.
	TaggedRetention time.Duration
	// MaxFinishedTagged caps the records kept of ended tagged processes;
	// the oldest go first. Default 64.
	MaxFinishedTagged int
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// exitGrace is how long the agent waits for EOF on a process's pipes
// after the process itself exited: a background grandchild may hold them
// open forever. What the process wrote is in the pipe by then and is taken
// whatever the wait; only a descendant's later output is left behind.
const exitGrace = 100 * time.Millisecond

// Service implements processpbconnect.ProcessHandler.
type Service struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	procs    map[uint32]*proc
	tags     map[string]*proc   // running tagged processes
	finished map[string]*record // ended tagged processes, for a while
	seq      uint64             // last record.seq given
}

var _ processpbconnect.ProcessHandler = (*Service)(nil)

// New returns a Service.
func New(opts *Options) *Service {
	s := &Service{procs: map[uint32]*proc{}, tags: map[string]*proc{}, finished: map[string]*record{}}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.OOMScoreAdj == 0 {
		s.opts.OOMScoreAdj = reaper.ChildOOMScoreAdj
	}
	if s.opts.TaggedOutputBytes <= 0 {
		s.opts.TaggedOutputBytes = 1 << 20
	}
	if s.opts.TaggedRetention <= 0 {
		s.opts.TaggedRetention = 10 * time.Minute
	}
	if s.opts.MaxFinishedTagged <= 0 {
		s.opts.MaxFinishedTagged = 64
	}
	if s.opts.KeepaliveInterval <= 0 {
		s.opts.KeepaliveInterval = 50 * time.Second
	}
	if s.opts.DefaultCwd == "" {
		s.opts.DefaultCwd = "/"
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// Env returns a copy of the base environment of every process.
func (s *Service) Env() map[string]string {
	env := make(map[string]string, len(s.opts.Env))
	for k, v := range s.opts.Env {
		env[k] = v
	}
	return env
}

// Close kills the process group of every running process and forgets
// the records of finished ones.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		p.signal(syscall.SIGKILL)
	}
	for _, r := range s.finished {
		s.dropLocked(r)
	}
}

// Start starts a process and streams its events until it ends.
func (s *Service) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	u, err := userOf(req.Header().Get("Authorization"))
	if err != nil {
		return err
	}
	p, sub, err := s.start(req.Msg, u)
	if err != nil {
		return err
	}
	var timedOut atomic.Bool
	if dl, ok := ctx.Deadline(); ok {
		timer := time.AfterFunc(time.Until(dl), func() {
			timedOut.Store(true)
			p.signal(syscall.SIGKILL)
		})
		go func() { <-p.done; timer.Stop() }()
	}
	err = s.follow(ctx, req.Header().Get("Keepalive-Ping-Interval"), p, sub, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	})
	if err == nil && timedOut.Load() {
		// The kill's end event can beat ctx.Done to follow: the caller
		// must still learn it was a timeout, not an ordinary end.
		return timeoutError(p)
	}
	return err
}

func timeoutError(p *proc) error {
	return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %d ran past its timeout and was killed", p.pid))
}

// Connect attaches to a running process and streams its events from now on.
func (s *Service) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.subscribe()
	if sub == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d has ended", p.pid))
	}
	return s.follow(ctx, req.Header().Get("Keepalive-Ping-Interval"), p, sub, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	})
}

// follow sends p's events to one stream: start, output, end, keepalives.
func (s *Service) follow(ctx context.Context, keepalive string, p *proc, sub *subscriber, send func(*processpb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	interval := s.opts.KeepaliveInterval
	if n, err := strconv.Atoi(keepalive); err == nil && n > 0 {
		interval = time.Duration(n) * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	for {
		select {
		case ev := <-sub.events:
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				return nil
			}
		case <-tick.C:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timeoutError(p)
			}
			return ctx.Err()
		}
	}
}

// start validates req, starts the process and subscribes the caller before
// any output can be produced.
func (s *Service) start(req *processpb.StartRequest, u user) (*proc, *subscriber, error) {
	cfg := req.GetProcess()
	if req.Pty != nil {
		return nil, nil, connect.NewError(connect.CodeUnimplemented, errors.New("PTY is not supported yet: start the process without pty"))
	}
	if cfg.GetCmd() == "" {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	env := make(map[string]string, len(s.opts.Env)+len(cfg.GetEnvs()))
	for k, v := range s.opts.Env {
		env[k] = v
	}
	if u.root {
		env["HOME"], env["USER"], env["LOGNAME"] = "/root", "root", "root"
	}
	for k, v := range cfg.GetEnvs() {
		env[k] = v
	}
	cwd := s.opts.DefaultCwd
	if u.named {
		// As envd: a named user starts at home, when there is one.
		if fi, err := os.Stat(env["HOME"]); err == nil && fi.IsDir() {
			cwd = env["HOME"]
		}
	}
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = *cfg.Cwd
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %q is not a directory", cwd))
	}
	path, err := LookPath(cfg.GetCmd(), env["PATH"])
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeNotFound, err)
	}
	tag := req.GetTag()
	s.mu.Lock()
	defer s.mu.Unlock()
	if tag != "" && s.tags[tag] != nil {
		return nil, nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a running process already has tag %q", tag))
	}
	p, err := s.spawn(path, cfg, env, cwd, req.GetStdin(), u)
	if err != nil {
		return nil, nil, err
	}
	p.tag = tag
	s.procs[p.pid] = p
	if tag != "" {
		p.rec = newRecord(tag, p.pid, s.opts.TaggedOutputBytes)
		s.tags[tag] = p
		// A new run under the tag replaces the record of the last one.
		if old := s.finished[tag]; old != nil {
			s.dropLocked(old)
		}
	}
	sub := p.subscribe()
	go s.watch(p)
	s.log.Debug("process started", "pid", p.pid, "cmd", cfg.GetCmd())
	return p, sub, nil
}

// spawn forks the process with its pipes.
func (s *Service) spawn(path string, cfg *processpb.ProcessConfig, env map[string]string, cwd string, withStdin bool, u user) (*proc, error) {
	var files [3]*os.File
	var parentEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	p := &proc{cfg: cfg, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	if withStdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		files[0], p.stdin = r, w
	} else {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		files[0] = f
	}
	for i := 1; i <= 2; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(files[:])
			closeAll(parentEnds)
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		files[i] = w
		parentEnds = append(parentEnds, r)
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	uid, gid := s.opts.Uid, s.opts.Gid
	if u.root {
		uid, gid = 0, 0
	}
	if uid != uint32(os.Geteuid()) || gid != uint32(os.Getegid()) {
		sys.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	}
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	argv := append([]string{cfg.GetCmd()}, cfg.GetArgs()...)
	child, err := reaper.Start(path, argv, &os.ProcAttr{Dir: cwd, Env: envList, Files: files[:], Sys: sys})
	closeAll(files[:])
	if err != nil {
		closeAll(parentEnds)
		if p.stdin != nil {
			p.stdin.Close()
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start %q: %w", cfg.GetCmd(), err))
	}
	p.child, p.pid = child, uint32(child.Pid)
	p.stdout, p.stderr = parentEnds[0], parentEnds[1]
	if err := reaper.SetOOMScoreAdj(child, s.opts.OOMScoreAdj); err != nil {
		// Rootless sandboxes may forbid it; the process still runs.
		s.log.Warn("raise oom_score_adj", "pid", p.pid, "err", err)
	}
	return p, nil
}

// watch pumps p's output to its subscribers and, once it has exited and
// its output has drained, sends the end event and forgets it.
func (s *Service) watch(p *proc) {
	var readers sync.WaitGroup
	for _, r := range []struct {
		f      *os.File
		stderr bool
	}{{p.stdout, false}, {p.stderr, true}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			p.pump(r.f, r.stderr)
		}()
	}
	ws := p.child.Wait()
	// Only now does the grace start: a pump still busy delivering earlier
	// output to a slow stream takes the rest of the pipe when it returns.
	grace := time.Now().Add(exitGrace)
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if err := f.SetReadDeadline(grace); err != nil {
			// Pipes are pollable on Linux; if not, a descendant holding
			// one open would hold the end event too.
			s.log.Warn("pipe read deadline", "pid", p.pid, "err", err)
		}
	}
	readers.Wait()
	p.stdout.Close()
	p.stderr.Close()
	end := &processpb.ProcessEvent_EndEvent{Exited: ws.Exited(), ExitCode: int32(ws.ExitStatus())}
	if ws.Exited() {
		end.Status = "exit status " + strconv.Itoa(ws.ExitStatus())
	} else if ws.Signaled() {
		end.ExitCode = -1
		end.Status = "signal: " + ws.Signal().String()
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		// As envd: the exec error's text, which E2B's SDKs show as the
		// CommandExitError's message.
		end.Error = &end.Status
	}
	if p.rec != nil {
		p.rec.end(int(end.ExitCode), end.Exited, end.Status)
	}
	s.mu.Lock()
	delete(s.procs, p.pid)
	if p.tag != "" && s.tags[p.tag] == p {
		delete(s.tags, p.tag)
		s.retainLocked(p.rec)
	}
	s.mu.Unlock()
	p.finish(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}})
	p.closeStdin()
	s.log.Debug("process ended", "pid", p.pid, "status", end.Status)
}

// find returns the running process a selector names.
func (s *Service) find(sel *processpb.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		if p := s.procs[v.Pid]; p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no running process with pid %d", v.Pid))
	case *processpb.ProcessSelector_Tag:
		if p := s.tags[v.Tag]; p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no running process with tag %q", v.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
}

// List returns the running processes.
func (s *Service) List(context.Context, *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	s.mu.Lock()
	out := make([]*processpb.ProcessInfo, 0, len(s.procs))
	for _, p := range s.procs {
		info := &processpb.ProcessInfo{Config: p.cfg, Pid: p.pid}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out = append(out, info)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return connect.NewResponse(&processpb.ListResponse{Processes: out}), nil
}

// SendInput writes to a process's stdin.
func (s *Service) SendInput(_ context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// StreamInput writes a stream of input, in order, to one process: the
// first message selects it.
func (s *Service) StreamInput(_ context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			found, err := s.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *processpb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message of StreamInput must select a process"))
			}
			if err := p.write(ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process's group.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v: use SIGTERM or SIGKILL", req.Msg.GetSignal()))
	}
	p.signal(sig)
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin so it reads EOF.
func (s *Service) CloseStdin(_ context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if !p.closeStdin() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no open stdin (started without stdin=true, or already closed)", p.pid))
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// Update resizes a PTY, which this agent does not offer yet.
func (s *Service) Update(context.Context, *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("PTY is not supported yet"))
}

// LookPath finds file in path — the PATH of the process to start, not the
// agent's own, which exec.LookPath would use. A name with a slash is
// returned as it is.
func LookPath(file, path string) (string, error) {
	if filepath.Base(file) != file {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}
