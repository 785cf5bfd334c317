package local_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// newSandbox creates a sandbox and destroys it at cleanup.
func newSandbox(t testing.TB, rt *local.Runtime, fl mcpbox.Flavor) (*mcpbox.Sandbox, *agentclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: fl})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	agentPIDs.Store(sb.ID, rt.PID(sb.ID))
	c := agentclient.ForSandbox(rt, sb.ID)
	t.Cleanup(func() {
		c.Close()
		if err := rt.Destroy(context.Background(), sb.ID); err != nil {
			t.Errorf("destroy: %v", err)
		}
		assertGone(t, rt, sb)
	})
	return sb, c
}

func newRuntime(t testing.TB) *local.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	rt, err := local.New(&local.Options{Home: testutil.Home(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// run runs argv in the sandbox and returns stdout, stderr and the result.
func run(t testing.TB, c *agentclient.Client, timeout time.Duration, argv ...string) (string, string, *agentclient.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	res, err := c.Run(ctx, agentclient.Command{Cmd: argv[0], Args: argv[1:]}, &out, &errb)
	if err != nil {
		t.Fatalf("run %q: %v (stderr %q)", argv, err, errb.String())
	}
	return out.String(), errb.String(), res
}

func TestCreateRunDestroy(t *testing.T) {
	rt := newRuntime(t)
	sb, c := newSandbox(t, rt, mcpbox.Flavors["small"])
	out, _, res := run(t, c, 10*time.Second, "sh", "-c", "id -u; pwd; echo $HOME; hostname; cat /proc/self/status | grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):'")
	if res.ExitCode != 0 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	for _, want := range []string{"1000\n", "/workspace\n", "/home/user\n", "sandbox\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	list, err := rt.List(context.Background())
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || !list[0].Alive {
		t.Fatalf("List = %v, %v; want the one live sandbox", list, err)
	}
	if err := rt.Destroy(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rt.Home(), "sessions", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("sandbox directory still there after destroy: %v", err)
	}
	if err := rt.Destroy(context.Background(), sb.ID); err != nil {
		t.Errorf("second destroy: %v", err)
	}
}

// agentPIDs remembers each test sandbox's agent pid, for checks after
// Destroy has removed what Runtime.PID reads.
var agentPIDs sync.Map

func agentPID(id string) int {
	pid, _ := agentPIDs.Load(id)
	n, _ := pid.(int)
	return n
}

// errValue is an error event's value, "" for other events.
func errValue(ev mcpbox.CodeEvent) string {
	if ev.Error == nil {
		return ""
	}
	return ev.Error.Value
}
