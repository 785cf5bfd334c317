package local_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
)

// BenchmarkExecute measures `x+1` on a warm Python context through POST
// /execute on a live sandbox, beside a bare Python REPL round trip over a
// pipe outside mcpbox.
func BenchmarkExecute(b *testing.B) {
	b.Run("baseline=raw-python-repl-pipe", func(b *testing.B) {
		cmd := exec.Command("/usr/bin/python3", "-u", "-c",
			"import sys\nx = 1\nfor line in sys.stdin:\n    print(repr(eval(line)), flush=True)")
		in, _ := cmd.StdinPipe()
		outPipe, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { in.Close(); cmd.Wait() }()
		out := bufio.NewReader(outPipe)
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				io.WriteString(in, "x+1\n")
				if line, err := out.ReadString('\n'); err != nil || line != "2\n" {
					b.Fatal(line, err)
				}
			})
		}
		t.Report(b)
	})
	b.Run("sandbox-warm-x+1", func(b *testing.B) {
		rt := newRuntime(b)
		_, c := newSandbox(b, rt, mcpbox.Flavors["small"])
		ctx := context.Background()
		exec := func(code string) string {
			var result string
			if err := c.Execute(ctx, agentclient.ExecuteRequest{Code: code, Language: "python"}, func(ev mcpbox.CodeEvent) {
				if ev.Type == "result" {
					result = ev.Text
				}
			}); err != nil {
				b.Fatal(err)
			}
			return result
		}
		exec("x = 1")
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				if r := exec("x+1"); r != "2" {
					b.Fatalf("x+1 = %q", r)
				}
			})
		}
		t.Report(b)
	})
}

// BenchmarkFirstExecute measures a fresh sandbox's first Python execution,
// cold kernel start included (create until the result is back), beside
// plain `python3 -c pass`.
func BenchmarkFirstExecute(b *testing.B) {
	b.Run("baseline=python3-c-pass", func(b *testing.B) {
		var t testutil.Timings
		for b.Loop() {
			t.Time(func() {
				if err := exec.Command("/usr/bin/python3", "-c", "pass").Run(); err != nil {
					b.Fatal(err)
				}
			})
		}
		t.Report(b)
	})
	b.Run("fresh-sandbox-first-execute", func(b *testing.B) {
		rt := newRuntime(b)
		fl := mcpbox.Flavors["small"]
		ctx := context.Background()
		var t testutil.Timings
		for b.Loop() {
			id := testutil.ID()
			t.Time(func() {
				sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: id, Flavor: fl})
				if err != nil {
					b.Fatal(err)
				}
				c := agentclient.ForSandbox(rt, sb.ID)
				defer c.Close()
				got := ""
				if err := c.Execute(ctx, agentclient.ExecuteRequest{Code: "1+1", Language: "python"}, func(ev mcpbox.CodeEvent) {
					if ev.Type == "result" {
						got = ev.Text
					}
				}); err != nil || got != "2" {
					b.Fatal(got, err)
				}
			})
			b.StopTimer()
			rt.Destroy(ctx, id)
			b.StartTimer()
		}
		t.Report(b)
	})
}
