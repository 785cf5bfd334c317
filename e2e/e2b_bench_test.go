package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// BenchmarkE2B times three calls through E2B's JavaScript SDK against a
// real mcpbox serve with a warm pool — Sandbox.create(), commands.run
// ('true') on a live sandbox, runCode('x+1') on a warm context — and the
// same three through MCP (go-sdk's client over Streamable HTTP) in the
// same run: create_session, execute_command 'true', execute_code 'x+1'.
// Each reports p50-ms and p99-ms. The JavaScript timings are taken inside
// node (performance.now around the SDK call), so node's start-up is not
// in them.
func BenchmarkE2B(b *testing.B) {
	testutil.RequireRoot(b)
	n := node(b)
	bin := build(b)
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("pools:\n  - flavor: small\n    size: 2\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	s := serve(b, bin, "--config", cfg)
	env := e2bEnv(s, "e2b_local")
	sdk := func(what string) func(b *testing.B) {
		return func(b *testing.B) {
			out, err := run(b, 10*time.Minute, env, n, "e2b.bench.mjs", what, strconv.Itoa(b.N))
			if err != nil {
				b.Fatalf("e2b.bench.mjs %s: %v\n%s", what, err, out)
			}
			var ms []float64
			if err := json.Unmarshal([]byte(lastLine(out)), &ms); err != nil || len(ms) != b.N {
				b.Fatalf("e2b.bench.mjs %s printed %q: %v", what, out, err)
			}
			reportMs(b, ms)
		}
	}
	b.Run("sdk=e2b/create", sdk("create"))
	b.Run("sdk=e2b/isRunning", sdk("health"))
	b.Run("sdk=e2b/commands.run", sdk("run"))
	b.Run("sdk=e2b/runCode", sdk("code"))

	cs := connectHTTP(b, s)
	defer cs.Close()
	call := func(b *testing.B, name string, args map[string]any) map[string]any {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %v", name, err, res)
		}
		m, _ := res.StructuredContent.(map[string]any)
		return m
	}
	b.Run("sdk=mcp/create_session", func(b *testing.B) {
		var tm testutil.Timings
		for b.Loop() {
			var id any
			tm.Time(func() { id = call(b, "create_session", nil)["session_id"] })
			b.StopTimer()
			call(b, "stop_session", map[string]any{"session_id": id})
			time.Sleep(1500 * time.Millisecond) // the pool refills, as above
			b.StartTimer()
		}
		tm.Report(b)
	})
	b.Run("sdk=mcp/execute_command", func(b *testing.B) {
		id := call(b, "create_session", nil)["session_id"]
		defer call(b, "stop_session", map[string]any{"session_id": id})
		timeCalls(b, cs, &mcp.CallToolParams{Name: "execute_command", Arguments: map[string]any{"command": "true", "session_id": id}})
	})
	b.Run("sdk=mcp/execute_code", func(b *testing.B) {
		id := warmSession(b, cs)
		defer call(b, "stop_session", map[string]any{"session_id": id})
		timeCalls(b, cs, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": id}})
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// reportMs reports the median and 99th percentile of ms, as
// testutil.Timings does.
func reportMs(b *testing.B, ms []float64) {
	s := slices.Clone(ms)
	slices.Sort(s)
	pct := func(p float64) float64 { return s[int(float64(len(s)-1)*p/100)] }
	b.ReportMetric(roundMs(pct(50)), "p50-ms")
	b.ReportMetric(roundMs(pct(99)), "p99-ms")
}

func roundMs(v float64) float64 {
	f, _ := strconv.ParseFloat(fmt.Sprintf("%.3f", v), 64)
	return f
}
