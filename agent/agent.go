// Package agent is the program that runs inside every sandbox (as PID 1 in
// the local runtime, as the container's entry point on Kubernetes). It
// serves, on one listener, the API of E2B's in-sandbox daemon envd:
//
//   - Connect RPC process.Process and filesystem.Filesystem, JSON and
//     binary codecs, over HTTP/1.1 and h2c;
//   - GET and POST /files;
//   - GET /health;
//   - the code interpreter's POST /execute and /contexts (package kernel).
//
// Beside them it serves routes of mcpbox's own, under /mcpbox/v1, in JSON
// (errors are {"message": "..."}):
//
//	GET    /mcpbox/v1/processes/{tag}/output   what is kept of the process
//	       started with this tag (process.Output): {"tag", "pid",
//	       "started" (RFC 3339), "stdout", "stderr" (the last
//	       TaggedOutputBytes of each, invalid UTF-8 replaced by U+FFFD),
//	       "stdout_dropped", "stderr_dropped" (older bytes let go),
//	       "done", "exit_code", "exited", "status"}; 404 for a tag no
//	       running process has and no finished one kept
//	DELETE /mcpbox/v1/processes/{tag}          forget a finished one: 204;
//	       409 while it runs, 404 if unknown
//	GET    /mcpbox/v1/deadline                 {"deadline": "<RFC 3339>"}
//	       or {"deadline": null}
//	PUT    /mcpbox/v1/deadline                 the same body sets it (null:
//	       none) and answers like GET; 409 once it has passed
//
// A process's record outlives the stream that started it, so any caller
// can read a background command by its tag. When the deadline passes,
// Serve kills every process and returns, and the sandbox ends with PID 1:
// a sandbox whose host is gone does not live on.
//
// Every process the agent starts gets a higher oom_score_adj than its own
// (ChildOOMScoreAdj), so that out of memory the kernel kills user code, not
// PID 1.
//
// The host side reaches it through package agentclient; the E2B adapter
// forwards SDK traffic to it unchanged. The agent imports nothing from the
// host side of mcpbox.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcpbox/mcpbox/agent/filesystem"
	"github.com/mcpbox/mcpbox/agent/kernel"
	"github.com/mcpbox/mcpbox/agent/process"
	"github.com/mcpbox/mcpbox/gen/filesystempb/filesystempbconnect"
	"github.com/mcpbox/mcpbox/gen/processpb/processpbconnect"
)

// Options configure the agent. The zero value serves as the current user.
type Options struct {
	// UID and GID are the identity user processes run as and uploaded
	// files belong to. Default: the agent's own.
	UID, GID int
	// Home is the user's home directory, where relative file paths point.
	Home string
	// Cwd is the default working directory of processes.
	Cwd string
	// Env is the whole base environment of user processes; requests add to
	// it. Nothing else from the agent's environment reaches them.
	Env map[string]string
	// Root confines the file API; default "/" (the sandbox root).
	Root string
	// MaxFileBytes caps one uploaded file; default 100 MiB.
	MaxFileBytes int64
	// MaxOutputBytes caps each output stream of one kernel execution;
	// default 1 MiB.
	MaxOutputBytes int64
	// KernelModules is Options.ModuleDir of the kernels (see
	// kernel.WritePythonModule); empty means drivers start from source.
	KernelModules string
	// Prestart names languages whose default kernel starts with the agent
	// instead of at its first execution.
	Prestart []string
	// Deadline is when the sandbox ends itself (Serve kills every process
	// and returns ErrDeadlinePassed); zero means never. PUT
	// /mcpbox/v1/deadline changes it.
	Deadline time.Time
	// ChildOOMScoreAdj is the oom_score_adj of every process the agent
	// starts, above the agent's own; default reaper.ChildOOMScoreAdj (1000).
	ChildOOMScoreAdj int
	// TaggedOutputBytes is how much of each output stream of a tagged
	// process the agent keeps (the last bytes); default 1 MiB.
	TaggedOutputBytes int
	// TaggedRetention is how long a tagged process's record is kept after
	// it ends; default 10 minutes.
	TaggedRetention time.Duration
	// MaxFinishedTagged caps the records kept of ended tagged processes,
	// oldest dropped first; default 64.
	MaxFinishedTagged int
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
	// Ready, if set, is called by Serve once the agent is built and about
	// to accept connections.
	Ready func()
}

// ErrDeadlinePassed is what Serve returns when the sandbox's deadline
// passed.
var ErrDeadlinePassed = errors.New("the sandbox's deadline passed")

// Agent is the agent's HTTP handler and the state behind it.
type Agent struct {
	mux      *http.ServeMux
	log      *slog.Logger
	proc     *process.Service
	kernels  *kernel.Manager
	deadline *deadline
}

// New returns an Agent for opts (nil means defaults).
func New(opts *Options) *Agent {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	if o.UID == 0 && o.GID == 0 && os.Geteuid() != 0 {
		o.UID, o.GID = os.Geteuid(), os.Getegid()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	proc := process.New(&process.Options{
		Uid:        uint32(o.UID),
		Gid:        uint32(o.GID),
		Env:        o.Env,
		DefaultCwd: o.Cwd,
		Logger:     o.Logger,

		OOMScoreAdj:       o.ChildOOMScoreAdj,
		TaggedOutputBytes: o.TaggedOutputBytes,
		TaggedRetention:   o.TaggedRetention,
		MaxFinishedTagged: o.MaxFinishedTagged,
	})
	fs := filesystem.New(&filesystem.Options{
		Root:         o.Root,
		Home:         o.Home,
		Uid:          o.UID,
		Gid:          o.GID,
		MaxFileBytes: o.MaxFileBytes,
		Logger:       o.Logger,
	})
	// Kernels start where processes do: a relative path means the same
	// file in a command, in code and in the file tools.
	kernelCwd := o.Cwd
	if kernelCwd == "" {
		kernelCwd = o.Home
	}
	kernels := kernel.New(&kernel.Options{
		UID: o.UID, GID: o.GID, Env: o.Env, Home: kernelCwd, Logger: o.Logger, MaxOutputBytes: o.MaxOutputBytes,
		ModuleDir: o.KernelModules,
	})
	for _, lang := range o.Prestart {
		if err := kernels.Prestart(lang); err != nil {
			o.Logger.Warn("prestart", "language", lang, "err", err)
		}
	}
	mux := http.NewServeMux()
	kh := kernels.Handler()
	mux.Handle("/execute", kh)
	mux.Handle("/contexts", kh)
	mux.Handle("/contexts/", kh)
	mux.Handle(processpbconnect.NewProcessHandler(proc))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(fs))
	mux.Handle("/files", fs.FilesHandler())
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	a := &Agent{mux: mux, log: o.Logger, proc: proc, kernels: kernels, deadline: newDeadline(o.Deadline)}
	a.handleMcpbox(mux)
	return a
}

func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// DeadlinePassed is closed once the sandbox's deadline has passed; Serve
// ends then, and so should anything else serving the Agent.
func (a *Agent) DeadlinePassed() <-chan struct{} { return a.deadline.passed }

// Close kills every process the agent started.
func (a *Agent) Close() error {
	a.deadline.stop()
	a.proc.Close()
	a.kernels.Close()
	return nil
}

// Serve serves the agent on ln until ctx ends or SIGTERM arrives, then
// stops its processes and returns nil; or until the deadline passes, then
// stops them and returns ErrDeadlinePassed.
func Serve(ctx context.Context, ln net.Listener, opts *Options) error {
	a := New(opts)
	defer a.Close()
	// No WriteTimeout: process and execution streams last as long as
	// their work. IdleTimeout frees kept-alive connections nobody uses.
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if opts != nil && opts.Ready != nil {
		opts.Ready()
	}
	var ended error
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-a.DeadlinePassed():
		a.log.Warn("the sandbox's deadline passed: killing every process and exiting", "deadline", a.deadline.get())
		ended = ErrDeadlinePassed
	}
	a.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return ended
}
