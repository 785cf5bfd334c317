package hosted_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// benchHosts is Hosts on the local runtime with the test server as "py",
// on template pyimg when cached is set (its install cached).
func benchHosts(b *testing.B, cached bool) (*hosted.Hosts, *manager.Manager) {
	return benchHostsWith(b, cached, hosted.Options{})
}

// benchHostsWith is benchHosts with options for Hosts.
func benchHostsWith(b *testing.B, cached bool, hopts hosted.Options) (*hosted.Hosts, *manager.Manager) {
	b.Helper()
	testutil.RequireRoot(b)
	rt, err := local.New(&local.Options{Home: testutil.Home(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	opts := &manager.Options{Runtime: rt, Store: memstore.New()}
	if cached {
		store, err := rt.Templates()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.FromImage(ctx, "pyimg", testutil.PythonImage(b), "test", nil); err != nil {
			b.Fatal(err)
		}
		opts.Templates = store
	}
	m, err := manager.New(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	hopts.Manager, hopts.Templates = m, localTemplates{rt}
	h, err := hosted.New(&hopts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		h.Close()
		m.StopAll(context.Background())
	})
	def := pyDef(b, "py", nil)
	if cached {
		def.Template = "pyimg"
		// The test image has no bytecode (the host's python3 has its
		// standard library compiled). As an install does for what it
		// installs (pip, Debian's python3), this one compiles what the
		// server imports, into the cache: the server then starts in the
		// sandbox as it does on the host, not compiling its imports.
		def.Env["PYTHONPYCACHEPREFIX"] = "/home/user/.cache/pycache"
		def.InstallCommands = []string{`echo ran >> "$HOME/installs"`, `python3 -c 'import json, os, sys, threading, time'`}
	}
	if err := h.Add(def); err != nil {
		b.Fatal(err)
	}
	return h, m
}

// direct starts the test server on the host and connects to it over
// stdio, as an MCP client on this machine would.
func direct(b *testing.B) *mcp.ClientSession {
	b.Helper()
	// The interpreter the sandboxes run (PATH may lead to a slower shim).
	cmd := exec.Command("/usr/bin/python3", "-c", pyServer(b))
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// BenchmarkWarmCall compares one tool call on a warm server: made
// directly over stdio to the server on the host, and through mcpbox's
// gateway to the same server in a sandbox (MCP client → gateway →
// hosted → the manager's door → the agent's process stream).
func BenchmarkWarmCall(b *testing.B) {
	args := map[string]any{"x": "hello"}
	b.Run("direct-stdio", func(b *testing.B) {
		cs := direct(b)
		defer cs.Close()
		var tm testutil.Timings
		for b.Loop() {
			tm.Time(func() {
				if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args}); err != nil {
					b.Fatal(err)
				}
			})
		}
		tm.Report(b)
	})
	b.Run("gateway", func(b *testing.B) {
		h, m := benchHosts(b, false)
		srv, err := mcpserver.New(mcpserver.Options{Manager: m, Hosted: h})
		if err != nil {
			b.Fatal(err)
		}
		ct, st := mcp.NewInMemoryTransports()
		if _, err := srv.For("alice").Connect(context.Background(), st, nil); err != nil {
			b.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(), ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		if _, err := cs.ListTools(context.Background(), nil); err != nil { // started and listed
			b.Fatal(err)
		}
		var tm testutil.Timings
		for b.Loop() {
			tm.Time(func() {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "py__echo", Arguments: args})
				if err != nil || res.IsError {
					b.Fatal(err, res)
				}
			})
		}
		tm.Report(b)
	})
}

// BenchmarkFirstCall compares the server's own start-up (a process on the
// host, up to its answer to initialize) with mcpbox's first call to it
// when its install is cached: a sandbox from the cached template, the
// start, the handshake, tools/list and the call. "cached-install" is a
// server started before, as after an idle stop or a crash, or for
// another owner: a sandbox of its template waits ready (the wait for it
// to be made after the last start is outside the timing).
// "cached-install-no-pool" keeps none, and makes the sandbox in the call.
func BenchmarkFirstCall(b *testing.B) {
	b.Run("server-start-alone", func(b *testing.B) {
		var tm testutil.Timings
		for b.Loop() {
			var cs *mcp.ClientSession
			tm.Time(func() { cs = direct(b) })
			b.StopTimer()
			cs.Close()
			b.StartTimer()
		}
		tm.Report(b)
	})
	for _, c := range []struct {
		name string
		warm int
	}{{"cached-install", 1}, {"cached-install-no-pool", -1}} {
		b.Run(c.name, func(b *testing.B) {
			h, m := benchHostsWith(b, true, hosted.Options{WarmSandboxes: c.warm})
			ctx := context.Background()
			if _, err := h.Call(ctx, "alice", "py", "count", nil, nil); err != nil { // installs and commits
				b.Fatal(err)
			}
			var tm testutil.Timings
			for b.Loop() {
				b.StopTimer()
				h.Stop("alice", "py")
				if c.warm > 0 {
					waitWarm(b, m)
				}
				b.StartTimer()
				tm.Time(func() {
					if _, err := h.Call(ctx, "alice", "py", "count", nil, nil); err != nil {
						b.Fatal(err)
					}
				})
			}
			tm.Report(b)
		})
	}
}

// waitWarm waits for a hosted server's sandbox to be ready in a pool.
func waitWarm(b *testing.B, m *manager.Manager) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		for name, n := range m.PoolStats() {
			if strings.HasSuffix(name, "/ephemeral+no-kernel") && n > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("no sandbox was made ready for the next start")
		}
	}
}
