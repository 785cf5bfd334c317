package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbox/mcpbox"
)

func (m *Main) serveCommand() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve mcpbox over HTTP (health and a debug view of live sandboxes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return m.serve(cmd.Context(), addr)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	return cmd
}

func (m *Main) serve(ctx context.Context, addr string) error {
	rt, err := m.runtime()
	if err != nil {
		return err
	}
	mode := "local"
	if rt.Rootless() {
		mode = "local (rootless: no cgroup limits)"
	}
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		sbs, err := rt.List(r.Context())
		status := "ok"
		if err != nil {
			status = "degraded: " + err.Error()
		}
		writeJSON(w, map[string]any{"status": status, "version": mcpbox.Version, "runtime": mode, "sandboxes": len(sbs)})
	})
	mux.HandleFunc("GET /debug/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		sbs, err := rt.List(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if sbs == nil {
			sbs = []*mcpbox.Sandbox{}
		}
		writeJSON(w, sbs)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(m.Stderr, "mcpbox %s serving on http://%s (runtime: %s, home: %s)\n", mcpbox.Version, ln.Addr(), mode, rt.Home())
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
	return nil
}
