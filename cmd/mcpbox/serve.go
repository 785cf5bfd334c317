package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/adapter/e2b"
	"github.com/mcpbox/mcpbox/adapter/httpserver"
	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/egress"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/config"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func (m *Main) serveCommand() *cobra.Command {
	var f configFlags
	var stopOnExit, insecure bool
	var origins []string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve MCP over Streamable HTTP (/mcp) and SSE (/sse), with /healthz, /readyz and /metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := m.loadConfig(cmd, &f)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("stop-sessions-on-exit") {
				c.StopSessionsOnExit = stopOnExit
			}
			if cmd.Flags().Changed("insecure") {
				c.Insecure = insecure
			}
			c.CORSOrigins = append(c.CORSOrigins, origins...)
			if err := c.Validate(); err != nil {
				return &usageError{err}
			}
			return m.serve(cmd.Context(), c)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&stopOnExit, "stop-sessions-on-exit", false,
		"stop every session when mcpbox exits (default: sessions outlive the server and are re-adopted at its next start)")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "listen on a non-loopback address even though no API key exists")
	cmd.Flags().StringArrayVar(&origins, "cors-origin", nil, "a browser origin allowed to call the server, such as https://app.example.com (repeatable)")
	return cmd
}

// stack is what serve, mcp and run run on: runtime, store, manager and
// the MCP tools over them.
type stack struct {
	rt     *local.Runtime
	st     *sqlite.Store
	mgr    *manager.Manager
	mcp    *mcpserver.Server
	hosted *hosted.Hosts // hosted MCP servers, for serve and mcp
	egress *egress.Proxy // the egress proxy sandboxes reach the network through
	report *manager.RecoverReport
	close  func()
}

// stackOptions say what a command needs of its stack.
type stackOptions struct {
	// maintain runs the manager's maintenance (lease renewal, and when
	// this process is the maintainer: recovery, reaping, pools). serve and
	// mcp do; a one-shot run does not.
	maintain bool
	// recover looks after what dead processes left, once, before serving.
	recover bool
	onCall  func(tool, code string, d time.Duration)
}

// open builds the stack on c's home. Every mcpbox process on a home
// shares its store: the store's leases decide which one maintains it, and
// recovery only touches what no live process looks after.
func (m *Main) open(ctx context.Context, c config.Config, log *slog.Logger, so stackOptions) (*stack, error) {
	eg, policies, err := newEgress(c, log)
	if err != nil {
		return nil, err
	}
	rt, err := local.New(&local.Options{Home: c.Home, Logger: log, Egress: eg})
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(filepath.Join(rt.Home(), "mcpbox.db"))
	if err != nil {
		return nil, err
	}
	s := &stack{rt: rt, st: st, egress: eg}
	closers := []func(){func() { eg.Close() }, func() { st.Close() }}
	s.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	flavors := map[string]mcpbox.Flavor{}
	for name, fl := range c.Flavors {
		flavors[name] = fl.Flavor(name)
	}
	var pools []manager.PoolSpec
	for _, p := range c.Pools {
		pools = append(pools, manager.PoolSpec{Template: p.Template, Flavor: p.Flavor, Size: p.Size})
	}
	var vols []mcpbox.Volume
	for _, v := range c.Volumes {
		pv, err := mcpbox.ParseVolume(v)
		if err != nil {
			// A bad volume never stops the server: it is left out.
			log.Error("volume left out of every session", "volume", v, "err", err)
			continue
		}
		vols = append(vols, pv)
	}
	cpus, mem := hostCapacity()
	s.mgr, err = manager.New(ctx, &manager.Options{
		Pools:   pools,
		Runtime: rt, Store: st, Logger: log, Flavors: flavors, Templates: templateCatalog(rt, log),
		MaxSessions: c.MaxSessions, MaxSessionsPerOwner: c.MaxSessionsPerOwner, MaxConcurrentExecutions: c.MaxConcurrentExecutions,
		DefaultIdleTimeout: c.IdleTimeout, DefaultTTL: c.DefaultTTL, MaxTTL: c.MaxTTL,
		VolumeRoots: c.VolumeRoots, Volumes: vols,
		HostCPUs: cpus, HostMemoryBytes: mem, Overcommit: c.Overcommit, LeaseTTL: c.LeaseTTL,
		MaxBackgroundCommands: c.MaxBackgroundCommands, MaxOutputBytes: int64(c.MaxOutputBytes), MaxFileBytes: int64(c.MaxFileBytes),
		Egress: eg, DefaultNetwork: c.Network,
	})
	if err != nil {
		s.close()
		return nil, err
	}
	policies.set(s.mgr)
	closers = append(closers, func() { s.mgr.Close(context.WithoutCancel(ctx)) })
	if so.recover {
		if s.report, err = s.mgr.Recover(ctx); err != nil {
			log.Warn("recover sessions", "err", err)
		}
	}
	if so.maintain {
		go s.mgr.Run(ctx)
	}
	var gateway *hosted.Hosts
	if so.maintain {
		// A long-running process keeps a sandbox ready for each hosted
		// server's first start.
		if s.hosted, err = hosted.New(&hosted.Options{Manager: s.mgr, File: c.ServersFile, Logger: log, Templates: hostedTemplates{rt}, WarmAtStart: true}); err != nil {
			s.close()
			return nil, err
		}
		closers = append(closers, s.hosted.Close)
		if c.Gateway {
			gateway = s.hosted
		}
	}
	s.mcp, err = mcpserver.New(mcpserver.Options{Manager: s.mgr, Version: mcpbox.Version, RequireSessionID: c.RequireSessionID, OnCall: so.onCall, Logger: log, Hosted: gateway})
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// hostCapacity is what this machine can give sandboxes: its CPUs and its
// memory (0 when unknown, which leaves admission unchecked).
func hostCapacity() (float64, int64) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return float64(goruntime.NumCPU()), 0
	}
	return float64(goruntime.NumCPU()), int64(si.Totalram) * int64(si.Unit)
}

func (m *Main) serve(ctx context.Context, c config.Config) error {
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: logLevel(c.LogLevel)}))
	var h *httpserver.Handler
	s, err := m.open(ctx, c, log, stackOptions{maintain: true, recover: true,
		onCall: func(tool, code string, d time.Duration) { h.Metrics().ToolCall(tool, code, d) }})
	if err != nil {
		return err
	}
	defer s.close()
	h = httpserver.New(httpserver.Options{MCP: s.mcp, Manager: s.mgr, Keys: s.st, Version: mcpbox.Version, Hosted: s.hosted,
		Runtime: runtimeName(s.rt), CORSOrigins: c.CORSOrigins, MaxBodyBytes: int64(c.MaxBodyMB) << 20, Logger: log,
		BodyTimeout: c.HTTPBodyTimeout, IdleTimeout: c.HTTPIdleTimeout, MaxConns: c.MaxConnections,
		Registry: metricsRegistry(s.egress)})

	keys, err := s.st.ListKeys(ctx)
	if err != nil {
		return err
	}
	live := 0
	for _, k := range keys {
		if !k.Revoked {
			live++
		}
	}
	if live == 0 && !isLoopbackHost(c.Host) && !c.Insecure {
		return &usageError{fmt.Errorf("refusing to listen on %s with no API key: anyone who reaches it could run code. "+
			"Create a key with `mcpbox key create --owner NAME`, listen on 127.0.0.1, or pass --insecure", c.Host)}
	}

	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv, ln := h.Server(), h.Listener(ln)
	// E2B's API on the same listener: its data plane is chosen by header
	// (or host) before any other route.
	secret, err := e2b.LoadSecret(filepath.Join(s.rt.Home(), "e2b-token.key"))
	if err != nil {
		return err
	}
	e2bh, err := e2b.New(e2b.Options{Manager: s.mgr, Keys: s.st, Secret: secret, Logger: log})
	if err != nil {
		return err
	}
	srv.Handler = e2bh.Wrap(srv.Handler)
	auth := "no API keys: every caller is the local owner"
	if live > 0 {
		auth = fmt.Sprintf("%d API keys", live)
	}
	fmt.Fprintf(m.Stderr, "mcpbox %s serving MCP on http://%s/mcp and /sse, and the E2B API on http://%[2]s (runtime: %s, home: %s, %s)\n",
		mcpbox.Version, ln.Addr(), runtimeName(s.rt), s.rt.Home(), auth)
	if rep := s.report; rep != nil {
		fmt.Fprintf(m.Stderr, "mcpbox: %d sessions re-adopted, %d ended, %d orphans cleaned\n", len(rep.Adopted), len(rep.Ended), len(rep.Orphans))
	} else {
		fmt.Fprintf(m.Stderr, "mcpbox: another mcpbox owns %s; not recovering sessions or filling pools\n", s.rt.Home())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(m.Stderr, "mcpbox: interrupted; shutting down (Ctrl-C again to exit at once)")
	defer m.exitOnSecondInterrupt()()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// SSE and streaming responses never end on their own; Shutdown's
	// deadline covers them.
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if c.StopSessionsOnExit {
		// Its own deadline: a slow Shutdown must not leave sandboxes behind.
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := s.mgr.StopAll(stopCtx)
		fmt.Fprintf(m.Stderr, "mcpbox: stopped %d %s on exit\n", n, plural(n, "session", "sessions"))
		return err
	}
	m.sayLeftRunning(s)
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runtimeName(rt *local.Runtime) string {
	if rt.Rootless() {
		return "local (rootless: no cgroup limits)"
	}
	return "local"
}

func logLevel(s string) slog.Level {
	var l slog.Level
	l.UnmarshalText([]byte(s))
	return l
}
