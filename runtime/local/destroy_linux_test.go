package local_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// TestDestroyManyForkBombs destroys several sandboxes at once, each full
// of a running fork bomb, as a shared host under load would: every one
// must go, with nothing left. (Destroy once gave up on "agent N did not
// exit" here, while the kernel tore the pid namespaces down one task at
// a time.)
func TestDestroyManyForkBombs(t *testing.T) {
	const n = 8
	rt := newRuntime(t)
	sbs := make([]*mcpbox.Sandbox, n)
	clients := make([]*agentclient.Client, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sbs[i], errs[i] = rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny})
		})
	}
	wg.Wait()
	for i, sb := range sbs {
		if sb == nil {
			continue
		}
		agentPIDs.Store(sb.ID, rt.PID(sb.ID))
		clients[i] = agentclient.ForSandbox(rt, sb.ID)
		// Whatever happens below, nothing may outlive the test.
		t.Cleanup(func() { rt.Destroy(context.Background(), sb.ID) })
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	for i, c := range clients {
		mustSh(t, c, `(b() { b | b & }; b) >/dev/null 2>>/tmp/bomb.err &`)
		errFile := fmt.Sprintf("/proc/%d/root/tmp/bomb.err", rt.PID(sbs[i].ID))
		// Each bomb runs into its limit before the next starts, so that
		// every sandbox is full when they are destroyed.
		waitUntil(t, 2*time.Minute, "bomb to run out of tasks", func() bool {
			b, _ := os.ReadFile(errFile)
			return len(b) > 0
		})
		c.Close()
	}

	for i := range n {
		wg.Go(func() { errs[i] = rt.Destroy(context.Background(), sbs[i].ID) })
	}
	wg.Wait()
	for i, sb := range sbs {
		if errs[i] != nil {
			t.Errorf("destroy %s: %v", sb.ID, errs[i])
		}
		assertGone(t, rt, sb)
	}
	hostCanFork(t)
}
