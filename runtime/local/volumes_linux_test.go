package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

func TestVolumes(t *testing.T) {
	rt := newRuntime(t)
	base, err := os.MkdirTemp("", "mcpbox-vol-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	os.Mkdir(ro, 0o755)
	os.Mkdir(rw, 0o777)
	os.WriteFile(filepath.Join(ro, "input.txt"), []byte("from the host"), 0o644)
	// The sandbox's user is host uid 101000: the operator owns what it may write.
	os.Chown(rw, 100000+1000, 100000+1000)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny, Volumes: []mcpbox.Volume{
		{HostPath: ro, SandboxPath: "/mnt/in", ReadOnly: true},
		{HostPath: rw, SandboxPath: "/mnt/out"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Destroy(context.Background(), sb.ID)
	c := agentclient.ForSandbox(rt, sb.ID)
	defer c.Close()
	out, _ := mustSh(t, c, "cat /mnt/in/input.txt; echo; echo x > /mnt/in/new 2>&1; echo result > /mnt/out/result.txt && echo wrote")
	if !strings.Contains(out, "from the host") || !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "wrote") {
		t.Errorf("volume behaviour:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "result.txt")); err != nil || string(b) != "result\n" {
		t.Errorf("read-write volume: host sees %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Error("write through a read-only volume reached the host")
	}
	if _, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny, Volumes: []mcpbox.Volume{{HostPath: ro, SandboxPath: "/proc/x"}}}); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
		t.Errorf("volume over /proc: %v", err)
	}
}
