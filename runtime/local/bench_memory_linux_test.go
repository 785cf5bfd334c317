package local_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/linux/cgroup"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// idleSessions is how many sandboxes BenchmarkIdleMemory keeps at once.
const idleSessions = 200

// BenchmarkIdleMemory creates 200 sandboxes, each with its default Python
// context started and idle, and reports the memory their cgroups hold (page
// cache and tmpfs included) beside an idle Python REPL's own resident set,
// the interpreter a session cannot do without. The timed part is nothing:
// the figures are the point.
func BenchmarkIdleMemory(b *testing.B) {
	testutil.RequireRoot(b)
	rt := newRuntime(b)
	ctx := context.Background()
	fl := mcpbox.Flavors["small"]
	var ids []string
	b.Cleanup(func() {
		for _, id := range ids {
			rt.Destroy(context.Background(), id)
		}
	})
	for range idleSessions {
		id := testutil.ID()
		sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: fl})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
		c := agentclient.ForSandbox(rt, sb.ID)
		if err := c.Execute(ctx, agentclient.ExecuteRequest{Code: "x = 1", Language: "python"}, func(mcpbox.CodeEvent) {}); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	var total int64
	for _, id := range ids {
		g, err := cgroup.Load("mcpbox/" + id)
		if err != nil {
			b.Fatal(err)
		}
		st, err := g.Stats()
		if err != nil || st.MemoryBytes < 0 {
			b.Fatalf("stats of %s: %+v %v", id, st, err)
		}
		total += st.MemoryBytes
	}
	base := replRSS(b)
	per := total / idleSessions
	for b.Loop() {
	}
	// After the loop: b.Loop resets what was reported before it.
	b.ReportMetric(float64(total)/(1<<20), "total-MiB")
	b.ReportMetric(float64(per)/(1<<20), "per-session-MiB")
	b.ReportMetric(float64(base)/(1<<20), "baseline-python-repl-anon-MiB")
	b.ReportMetric(float64(per-base)/(1<<20), "overhead-per-session-MiB")
}

// replRSS is the anonymous resident memory of an idle python3 REPL reading
// a pipe: what each interpreter costs on its own. (Its whole RSS would also
// count the shared library pages that every sandbox shares through the
// page cache, and that a cgroup is charged only once for.)
func replRSS(b *testing.B) int64 {
	cmd := exec.Command("/usr/bin/python3", "-u", "-c", "import sys\nfor line in sys.stdin: print(line, end='')")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	io.WriteString(in, "ready\n")
	bufio.NewReader(out).ReadString('\n')
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no RssAnon")
	return 0
}
