package hosted_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// TestInSandbox runs the test server in a real sandbox: its env arrives,
// it sees the sandbox's filesystem and not the host's, a crash is
// reported and the server comes back.
func TestInSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	rt, err := local.New(&local.Options{Home: testutil.Home(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hosted.New(&hosted.Options{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		h.Close()
		m.StopAll(context.Background())
	}()
	def := pyDef(t, "py", map[string]string{"TOKEN": "tok-123"})
	def.InstallCommands = []string{"echo ran >> installs"}
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	if got := call(t, h, "alice", "py", "env", map[string]any{"name": "TOKEN"}); got != "tok-123" {
		t.Errorf("TOKEN = %q", got)
	}
	if got := call(t, h, "alice", "py", "installs", nil); got != "1" {
		t.Errorf("installs = %s", got)
	}
	list, err := m.List(ctx, "alice", mcpbox.SessionFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("alice's sessions: %v %v", list, err)
	}
	testutil.Track(list[0].ID)
	// The secret is on no command line in the sandbox.
	res, err := m.RunCommand(ctx, "alice", list[0].ID, manager.CommandRequest{Command: "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), "tok-123") {
		t.Errorf("the server's env is on a command line: %s", res.Stdout)
	}
	_, err = h.Call(ctx, "alice", "py", "crash", nil, nil)
	if mcpbox.ErrorCode(err) != mcpbox.EUNAVAILABLE || !strings.Contains(err.Error(), "dying on purpose") {
		t.Fatalf("crash: %v", err)
	}
	if got := call(t, h, "alice", "py", "count", nil); got != "1" {
		t.Errorf("count after restart = %s", got)
	}
}
