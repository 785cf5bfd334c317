package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// A paused sandbox keeps its processes and memory but runs nothing, its
// agent included; resumed, it goes on; paused, it can still be destroyed.
func TestPause(t *testing.T) {
	rt := newRuntime(t) // as root: the cgroup freezer needs it
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Destroy(context.Background(), sb.ID) })
	c := agentclient.ForSandbox(rt, sb.ID)
	defer c.Close()
	mustSh(t, c, `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.01; done' >/dev/null 2>&1 &`)
	count := func() string { out, _ := mustSh(t, c, "cat /tmp/n"); return strings.TrimSpace(out) }
	time.Sleep(100 * time.Millisecond)

	if err := rt.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = agentclient.ForSandbox(rt, sb.ID).Health(hctx)
	hcancel()
	if err == nil {
		t.Error("a paused sandbox's agent answered")
	}
	if err := rt.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	before := count()
	time.Sleep(200 * time.Millisecond)
	if after := count(); after == before {
		t.Errorf("the loop did not run on after Resume: %s then %s", before, after)
	}

	if err := rt.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := rt.Destroy(ctx, sb.ID); err != nil {
		t.Errorf("Destroy of a paused sandbox: %v", err)
	}
	if list, _ := rt.List(ctx); len(list) != 0 {
		t.Errorf("left after Destroy: %v", list)
	}
	if err := rt.Pause(ctx, sb.ID); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
		t.Errorf("Pause of a destroyed sandbox: %v", err)
	}
}
