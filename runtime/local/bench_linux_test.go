package local_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// BenchmarkCreate measures creating a sandbox until its agent answers
// /health (destroy is outside the timed part), beside the raw cost of
// starting `sh -c true` on the host.
func BenchmarkCreate(b *testing.B) {
	b.Run("baseline=host-sh-true", func(b *testing.B) {
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
					b.Fatal(err)
				}
			})
		}
		t.Report(b)
	})
	b.Run("create-until-health", func(b *testing.B) {
		rt := newRuntime(b)
		fl, _ := mcpbox.LookupFlavor("small")
		var t testutil.Timings
		for b.Loop() {
			id := testutil.ID()
			t.Time(func() {
				if _, err := rt.Create(context.Background(), mcpbox.SandboxSpec{ID: id, Flavor: fl}); err != nil {
					b.Fatal(err)
				}
			})
			b.StopTimer()
			if err := rt.Destroy(context.Background(), id); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		t.Report(b)
	})
}

// BenchmarkProcessStart measures `sh -c true` through process.Start on a
// live sandbox, beside a raw fork+exec of the same on the host.
func BenchmarkProcessStart(b *testing.B) {
	b.Run("baseline=host-fork-exec", func(b *testing.B) {
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
					b.Fatal(err)
				}
			})
		}
		t.Report(b)
	})
	for _, codec := range []string{"proto", "json"} {
		b.Run("sandbox-sh-true/codec="+codec, func(b *testing.B) {
			rt := newRuntime(b)
			sb, _ := newSandbox(b, rt, mcpbox.Flavors["small"])
			c := agentclient.ForSandbox(rt, sb.ID, codecOption(codec)...)
			defer c.Close()
			var t testutil.Timings
			for b.Loop() {
				t.Time(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					res, err := c.Run(ctx, agentclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "true"}}, nil, nil)
					if err != nil || res.ExitCode != 0 {
						b.Fatal(res, err)
					}
				})
			}
			t.Report(b)
		})
	}
}
