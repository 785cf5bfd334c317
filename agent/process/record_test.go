package process_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agent/process"
	"github.com/mcpbox/mcpbox/agent/reaper"
	"github.com/mcpbox/mcpbox/gen/processpb"
)

func tagged(tag, script string) *processpb.StartRequest {
	req := cmd("sh", "-c", script)
	req.Tag = &tag
	return req
}

// waitDone polls the record of tag until its process has ended.
func waitDone(ctx context.Context, t *testing.T, svc *process.Service, tag string) *process.Output {
	t.Helper()
	for {
		out, err := svc.Output(tag)
		if err != nil {
			t.Fatalf("Output(%q): %v", tag, err)
		}
		if out.Done {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Output(%q) never done: %+v", tag, out)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestTaggedRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name   string
		opts   process.Options
		script string
		detach bool // the starting stream leaves at once
		want   process.Output
	}{
		{
			name:   "output and end",
			script: "echo out; echo err >&2; exit 3",
			want:   process.Output{Stdout: "out\n", Stderr: "err\n", Done: true, ExitCode: 3, Exited: true, Status: "exit status 3"},
		},
		{
			name:   "recorded with nobody attached",
			script: "sleep 0.2; echo late",
			detach: true,
			want:   process.Output{Stdout: "late\n", Done: true, Exited: true, Status: "exit status 0"},
		},
		{
			name:   "only the last bytes are kept",
			opts:   process.Options{TaggedOutputBytes: 8},
			script: "printf 0123456789abcdef; printf xyz >&2",
			want:   process.Output{Stdout: "89abcdef", StdoutDropped: 8, Stderr: "xyz", Done: true, Exited: true, Status: "exit status 0"},
		},
		{
			name:   "invalid UTF-8 is replaced, a cut character dropped",
			opts:   process.Options{TaggedOutputBytes: 5},
			script: `printf 'aé\377\376ok'; printf 'x€€' >&2`,
			want:   process.Output{Stdout: "\uFFFDok", StdoutDropped: 2, Stderr: "€", StderrDropped: 2, Done: true, Exited: true, Status: "exit status 0"},
		},
		{
			name:   "killed",
			script: "kill -9 $$",
			want:   process.Output{Done: true, ExitCode: -1, Status: "signal: killed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, clients := serveWith(t, &tt.opts)
			c := clients["proto"]
			tag := strings.ReplaceAll(tt.name, " ", "-")
			var pid uint32
			if tt.detach {
				sctx, scancel := context.WithCancel(ctx)
				stream, err := c.Start(sctx, connect.NewRequest(tagged(tag, tt.script)))
				if err != nil || !stream.Receive() {
					t.Fatalf("start: %v %v", err, stream.Err())
				}
				pid = stream.Msg().GetEvent().GetStart().GetPid()
				scancel()
				stream.Close()
			} else {
				r, err := start(ctx, c, tagged(tag, tt.script), nil)
				if err != nil {
					t.Fatal(err)
				}
				pid = r.pid
			}
			got := waitDone(ctx, t, svc, tag)
			if got.Tag != tag || got.PID != pid || got.Started.IsZero() {
				t.Errorf("tag %q pid %d started %v, want %q %d and a start time", got.Tag, got.PID, got.Started, tag, pid)
			}
			got.Tag, got.PID, got.Started = "", 0, time.Time{}
			if *got != tt.want {
				t.Errorf("Output = %+v\n          want %+v", *got, tt.want)
			}
		})
	}
}

func TestTaggedRecordLifetime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Run("unknown, running, forgotten", func(t *testing.T) {
		svc, clients := serveWith(t, nil)
		c := clients["proto"]
		if _, err := svc.Output("nope"); !errors.Is(err, process.ErrUnknownTag) {
			t.Errorf("Output of an unknown tag: %v", err)
		}
		if err := svc.Forget("nope"); !errors.Is(err, process.ErrUnknownTag) {
			t.Errorf("Forget of an unknown tag: %v", err)
		}
		yes := true
		req := tagged("job", "echo ready; read x; echo got $x")
		req.Stdin = &yes
		done := make(chan *result, 1)
		go func() {
			r, _ := start(ctx, c, req, nil)
			done <- r
		}()
		var out *process.Output
		for out == nil || out.Stdout != "ready\n" {
			var err error
			if out, err = svc.Output("job"); err != nil && !errors.Is(err, process.ErrUnknownTag) {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if out.Done {
			t.Errorf("running process reported done: %+v", out)
		}
		if err := svc.Forget("job"); !errors.Is(err, process.ErrRunning) {
			t.Errorf("Forget of a running process: %v", err)
		}
		if _, err := start(ctx, c, tagged("job", "true"), nil); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("second start under a running tag: %v", err)
		}
		sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "job"}}
		in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("go\n")}}
		if _, err := c.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: in})); err != nil {
			t.Fatal(err)
		}
		<-done
		if out := waitDone(ctx, t, svc, "job"); out.Stdout != "ready\ngot go\n" {
			t.Errorf("stdout %q", out.Stdout)
		}
		// A new run under a finished tag replaces its record.
		if _, err := start(ctx, c, tagged("job", "echo again"), nil); err != nil {
			t.Fatal(err)
		}
		if out := waitDone(ctx, t, svc, "job"); out.Stdout != "again\n" {
			t.Errorf("after a rerun stdout %q", out.Stdout)
		}
		if err := svc.Forget("job"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Output("job"); !errors.Is(err, process.ErrUnknownTag) {
			t.Errorf("Output after Forget: %v", err)
		}
	})
	t.Run("at most MaxFinishedTagged, oldest dropped", func(t *testing.T) {
		svc, clients := serveWith(t, &process.Options{MaxFinishedTagged: 2})
		for i := range 3 {
			if _, err := start(ctx, clients["proto"], tagged("t"+strconv.Itoa(i), "true"), nil); err != nil {
				t.Fatal(err)
			}
			waitDone(ctx, t, svc, "t"+strconv.Itoa(i))
		}
		for i, want := range []bool{false, true, true} {
			if _, err := svc.Output("t" + strconv.Itoa(i)); (err == nil) != want {
				t.Errorf("t%d kept = %v, want %v", i, err == nil, want)
			}
		}
	})
	t.Run("forgotten after TaggedRetention", func(t *testing.T) {
		svc, clients := serveWith(t, &process.Options{TaggedRetention: time.Millisecond})
		if _, err := start(ctx, clients["proto"], tagged("brief", "true"), nil); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := svc.Output("brief"); errors.Is(err, process.ErrUnknownTag) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("record outlived its retention")
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
}

// TestOOMScoreAdj checks that user processes are more killable than the
// agent: the OOM killer must pick them, not PID 1.
func TestOOMScoreAdj(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct {
		name  string
		score int
		want  string
	}{
		{"default", 0, strconv.Itoa(reaper.ChildOOMScoreAdj)},
		{"configured", 500, "500"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, clients := serveWith(t, &process.Options{OOMScoreAdj: tt.score})
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			stream, err := clients["proto"].Start(sctx, connect.NewRequest(cmd("sleep", "60")))
			if err != nil || !stream.Receive() {
				t.Fatalf("start: %v %v", err, stream.Err())
			}
			defer stream.Close()
			// The start event leaves the agent after its write.
			pid := stream.Msg().GetEvent().GetStart().GetPid()
			b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/oom_score_adj")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != tt.want {
				t.Errorf("oom_score_adj = %q, want %q", got, tt.want)
			}
		})
	}
}
