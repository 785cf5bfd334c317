package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/config"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func (m *Main) serveCommand() *cobra.Command {
	var f configFlags
	var stopOnExit bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve mcpbox over HTTP (health and a debug view of live sandboxes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := m.loadConfig(cmd, &f)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("stop-sessions-on-exit") {
				c.StopSessionsOnExit = stopOnExit
			}
			return m.serve(cmd.Context(), c)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&stopOnExit, "stop-sessions-on-exit", false,
		"stop every session when mcpbox exits (default: sessions outlive the server and are re-adopted at its next start)")
	return cmd
}

// server is what serve wires together.
type server struct {
	rt  *local.Runtime
	mgr *manager.Manager
}

func (m *Main) serve(ctx context.Context, c config.Config) error {
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: logLevel(c.LogLevel)}))
	rt, err := local.New(&local.Options{Home: c.Home, Logger: log})
	if err != nil {
		return err
	}
	st, err := sqlite.Open(filepath.Join(rt.Home(), "mcpbox.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	flavors := map[string]mcpbox.Flavor{}
	for name, fl := range c.Flavors {
		flavors[name] = fl.Flavor(name)
	}
	var pools []manager.PoolSpec
	for _, p := range c.Pools {
		pools = append(pools, manager.PoolSpec{Template: p.Template, Flavor: p.Flavor, Size: p.Size})
	}
	mgr, err := manager.New(ctx, &manager.Options{
		Pools:   pools,
		Runtime: rt, Store: st, Logger: log, Flavors: flavors,
		MaxSessions: c.MaxSessions, MaxSessionsPerOwner: c.MaxSessionsPerOwner, MaxConcurrentExecutions: c.MaxConcurrentExecutions,
		DefaultIdleTimeout: c.IdleTimeout, DefaultTTL: c.DefaultTTL, MaxTTL: c.MaxTTL,
	})
	if err != nil {
		return err
	}
	defer mgr.Close(context.WithoutCancel(ctx))
	rep, err := mgr.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover sessions: %w", err)
	}
	if err := mgr.StartPools(ctx); err != nil {
		return err
	}
	go mgr.RunReaper(ctx, 10*time.Second)

	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: (&server{rt: rt, mgr: mgr}).routes(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(m.Stderr, "mcpbox %s serving on http://%s (runtime: %s, home: %s; %d sessions re-adopted, %d ended, %d orphans cleaned)\n",
		mcpbox.Version, ln.Addr(), runtimeName(rt), rt.Home(), len(rep.Adopted), len(rep.Ended), len(rep.Orphans))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if c.StopSessionsOnExit {
		n, err := mgr.StopAll(sctx)
		fmt.Fprintf(m.Stderr, "mcpbox: stopped %d sessions on exit\n", n)
		return err
	}
	return nil
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		sbs, err := s.rt.List(r.Context())
		status := "ok"
		if err != nil {
			status = "degraded: " + err.Error()
		}
		writeJSON(w, map[string]any{"status": status, "version": mcpbox.Version, "runtime": runtimeName(s.rt), "sessions": len(sbs)})
	})
	mux.HandleFunc("GET /debug/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		sbs, err := s.rt.List(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if sbs == nil {
			sbs = []*mcpbox.Sandbox{}
		}
		writeJSON(w, sbs)
	})
	return mux
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
