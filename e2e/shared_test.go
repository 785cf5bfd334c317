package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

// TestSharedHome runs three mcpbox processes on one home — two `mcpbox
// mcp` and one `mcpbox serve`, as Claude Desktop and Cursor beside a
// server — and starts and kills them in a loop while sessions are made and
// used through all three. No sandbox in use is ever destroyed, the limits
// hold across the three, a session made through one is usable through the
// others, and what a killed process left is taken over once its lease
// expires.
func TestSharedHome(t *testing.T) {
	testutil.RequireRoot(t)
	bin := build(t)
	home := testutil.Home(t)
	cfg := filepath.Join(home, "config.yaml")
	const perOwner = 5
	os.WriteFile(cfg, []byte(fmt.Sprintf("max_sessions_per_owner: %d\nlease_ttl: 1s\n", perOwner)), 0o600)
	env := []string{"MCPBOX_HOME=" + home, "MCPBOX_CONFIG=" + cfg}

	srv := &server{bin: bin, home: home, url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	startServe := func() *proc {
		p := srv.startEnv(t, env, "--config", cfg)
		t.Cleanup(func() { p.stop(t) })
		return p
	}
	startMCP := func() *stdio { return startStdioEnv(t, bin, env, "--config", cfg) }
	httpClient := func() *mcp.ClientSession {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.url + "/mcp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}

	serveProc := startServe()
	a, b := startMCP(), startMCP()
	web := httpClient()
	clients := func() []*mcp.ClientSession { return []*mcp.ClientSession{a.cs, b.cs, web} }

	// kept are sessions that must stay usable, each with its x.
	kept := map[string]int{}
	check := func(round int) {
		t.Helper()
		i := 0
		for id, x := range kept {
			cs := clients()[i%3]
			i++
			out := callOK(t, cs, "execute_code", map[string]any{"session_id": id, "code": "print(x)"})
			if got := strings.TrimSpace(fmt.Sprint(out["stdout"])); got != fmt.Sprint(x) {
				t.Fatalf("round %d: session %s says x = %q through client %d, want %d: a sandbox in use lost its state", round, id, got, i%3, x)
			}
		}
	}
	for round := range 3 {
		// One session through each process, used through the others.
		for i, cs := range clients() {
			out := callOK(t, cs, "execute_code", map[string]any{"code": fmt.Sprintf("x = %d", 100*round+i)})
			kept[out["session_id"].(string)] = 100*round + i
		}
		check(round)
		// The limit holds across the three: with the owner at its maximum,
		// every process refuses another session.
		for len(kept) < perOwner {
			out := callOK(t, clients()[len(kept)%3], "execute_code", map[string]any{"code": "x = 7"})
			kept[out["session_id"].(string)] = 7
		}
		for i, cs := range clients() {
			res := call(t, cs, "create_session", map[string]any{})
			if !res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), mcpbox.ELIMIT) {
				t.Fatalf("round %d: client %d created a session past the owner's limit of %d: %+v", round, i, perOwner, res.StructuredContent)
			}
		}
		// Kill one process without warning, restart it: nothing in use
		// goes, and its records are taken over once its lease runs out.
		switch round % 3 {
		case 0:
			syscall.Kill(serveProc.cmd.Process.Pid, syscall.SIGKILL)
			<-serveProc.done
			serveProc = startServe()
			web = httpClient()
		case 1:
			syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
			a = startMCP()
		case 2:
			syscall.Kill(b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
			b = startMCP()
		}
		waitHolders(t, home, 10*time.Second)
		check(round)
		// Free room for the next round: stop three sessions, through a
		// process that did not make them.
		n := 0
		for id := range kept {
			if n == 3 {
				break
			}
			callOK(t, clients()[(n+1)%3], "stop_session", map[string]any{"session_id": id})
			delete(kept, id)
			n++
		}
	}
	check(3)
	// Nothing of the test may outlive it: the sessions it kept are not
	// ephemeral, and no process here stops them on exit.
	for id := range kept {
		callOK(t, web, "stop_session", map[string]any{"session_id": id})
	}
}

// waitHolders waits until every live record is held by a process whose
// lease is live: what a killed process held has been taken over.
func waitHolders(t *testing.T, home string, limit time.Duration) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(home, "mcpbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		recs, err := st.ListSessions(ctx, mcpbox.SessionFilter{States: mcpbox.LiveStates})
		if err != nil {
			t.Fatal(err)
		}
		orphaned := ""
		for _, r := range recs {
			h, exp, _ := st.Lease(ctx, "process/"+r.Holder)
			if h != r.Holder || time.Now().After(exp) {
				orphaned = r.ID + " (held by " + r.Holder + ")"
				break
			}
		}
		if orphaned == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s was not taken over within %s of its process's death", orphaned, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call runs a tool and returns its result, failing on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// callOK runs a tool that must succeed and returns its structured result.
func callOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res := call(t, cs, name, args)
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		t.Fatalf("%s %v failed: %s", name, args, b)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out
}
