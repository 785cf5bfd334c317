package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// Benchmarks of execute_code through real transports against a real
// mcpbox binary, beside mcp-server-code-runner (an unsandboxed MCP code
// runner from npm) as the peer figure. BENCHMARKS.md has the results.

func connectHTTP(b *testing.B, s *server) *mcp.ClientSession {
	b.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", DisableStandaloneSSE: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func connectCommand(b *testing.B, cmd *exec.Cmd) *mcp.ClientSession {
	b.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// warmSession creates a session with a live Python kernel.
func warmSession(b *testing.B, cs *mcp.ClientSession) string {
	b.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x = 1"}})
	if err != nil || res.IsError {
		b.Fatalf("warm up: %v %v", err, res)
	}
	var out struct {
		SessionID string `json:"session_id"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	return out.SessionID
}

func timeCalls(b *testing.B, cs *mcp.ClientSession, params *mcp.CallToolParams) {
	b.Helper()
	var tm testutil.Timings
	for b.Loop() {
		tm.Time(func() {
			res, err := cs.CallTool(context.Background(), params)
			if err != nil || res.IsError {
				b.Fatalf("%v %v", err, res)
			}
		})
	}
	tm.Report(b)
}

func BenchmarkExecuteCode(b *testing.B) {
	testutil.RequireRoot(b)
	bin := build(b)
	s := serve(b, bin)

	b.Run("streamable-http", func(b *testing.B) {
		cs := connectHTTP(b, s)
		defer cs.Close()
		id := warmSession(b, cs)
		timeCalls(b, cs, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": id}})
	})
	b.Run("stdio", func(b *testing.B) {
		cmd := exec.Command(bin, "mcp")
		cmd.Env = append(os.Environ(), "MCPBOX_HOME="+s.home)
		cs := connectCommand(b, cmd)
		defer cs.Close()
		id := warmSession(b, cs)
		timeCalls(b, cs, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": id}})
	})
	b.Run("peer=mcp-server-code-runner", func(b *testing.B) {
		// It logs to stdout beside its MCP messages, which a
		// strict client refuses; grep keeps only the JSON lines.
		cmd := exec.Command("sh", "-c", `"$0" node_modules/mcp-server-code-runner/dist/cli.js | grep --line-buffered "^{"`, node(b))
		cs := connectCommand(b, cmd)
		defer cs.Close()
		timeCalls(b, cs, &mcp.CallToolParams{Name: "run-code", Arguments: map[string]any{"code": "print(1+1)", "languageId": "python"}})
	})
}

// BenchmarkConcurrentClients runs 32 clients, each on its own MCP
// connection and session, calling execute_code "x+1" as fast as they can.
func BenchmarkConcurrentClients(b *testing.B) {
	testutil.RequireRoot(b)
	bin := build(b)
	// Every client is the local owner; let it hold them all.
	b.Setenv("MCPBOX_MAX_SESSIONS_PER_OWNER", "64")
	s := serve(b, bin)
	const clients = 32
	type client struct {
		cs *mcp.ClientSession
		id string
	}
	cl := make([]client, clients)
	for i := range cl {
		cl[i].cs = connectHTTP(b, s)
		defer cl[i].cs.Close()
		cl[i].id = warmSession(b, cl[i].cs)
	}
	var errs atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, c := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": c.id}})
				if err != nil || res.IsError {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
	b.ReportMetric(float64(errs.Load()), "errors")
	if errs.Load() > 0 {
		b.Errorf("%d of %d calls failed", errs.Load(), b.N)
	}
}
