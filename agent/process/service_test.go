package process_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agent/process"
	"github.com/mcpbox/mcpbox/gen/processpb"
	"github.com/mcpbox/mcpbox/gen/processpb/processpbconnect"
)

// serve starts the service on an HTTP/1.1 + h2c test server and returns a
// client per codec.
func serve(t *testing.T) map[string]processpbconnect.ProcessClient {
	_, clients := serveWith(t, nil)
	return clients
}

// serveWith is serve for a service with opts (nil: defaults); it returns
// the service too.
func serveWith(t *testing.T, opts *process.Options) (*process.Service, map[string]processpbconnect.ProcessClient) {
	t.Helper()
	o := process.Options{}
	if opts != nil {
		o = *opts
	}
	o.Uid, o.Gid = uint32(os.Getuid()), uint32(os.Getgid())
	o.Env = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": t.TempDir()}
	o.DefaultCwd = t.TempDir()
	svc := process.New(&o)
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(svc))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() { svc.Close(); srv.Close() })
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: tr}
	return svc, map[string]processpbconnect.ProcessClient{
		"proto": processpbconnect.NewProcessClient(hc, srv.URL),
		"json":  processpbconnect.NewProcessClient(hc, srv.URL, connect.WithProtoJSON()),
	}
}

type result struct {
	stdout, stderr bytes.Buffer
	pid            uint32
	end            *processpb.ProcessEvent_EndEvent
	order          []string // event kinds as they came
}

func start(ctx context.Context, c processpbconnect.ProcessClient, req *processpb.StartRequest, onData func(*result)) (*result, error) {
	stream, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	r := &result{}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			r.pid = ev.GetStart().GetPid()
			r.order = append(r.order, "start")
		case ev.GetData() != nil:
			r.stdout.Write(ev.GetData().GetStdout())
			r.stderr.Write(ev.GetData().GetStderr())
			r.order = append(r.order, "data")
			if onData != nil {
				onData(r)
			}
		case ev.GetEnd() != nil:
			r.end = ev.GetEnd()
			r.order = append(r.order, "end")
		}
	}
	return r, stream.Err()
}

func cmd(name string, args ...string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: name, Args: args}}
}

func TestProcess(t *testing.T) {
	t.Setenv("AGENT_SECRET", "leak")
	for codec, c := range serve(t) {
		t.Run(codec, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Run("output and exit code", func(t *testing.T) {
				r, err := start(ctx, c, cmd("sh", "-c", "echo out; echo err >&2; exit 3"), nil)
				if err != nil {
					t.Fatal(err)
				}
				if r.stdout.String() != "out\n" || r.stderr.String() != "err\n" || r.end.GetExitCode() != 3 || !r.end.GetExited() || r.end.GetStatus() != "exit status 3" {
					t.Errorf("got %q %q %v", r.stdout.String(), r.stderr.String(), r.end)
				}
				if r.order[0] != "start" || r.order[len(r.order)-1] != "end" {
					t.Errorf("event order %v", r.order)
				}
			})
			t.Run("non-utf8 bytes", func(t *testing.T) {
				r, err := start(ctx, c, cmd("printf", `\377\376\000`), nil)
				if err != nil || r.stdout.String() != "\xff\xfe\x00" {
					t.Errorf("got %q, %v", r.stdout.String(), err)
				}
			})
			t.Run("clean environment", func(t *testing.T) {
				req := cmd("sh", "-c", "echo A=$A; echo SECRET=$AGENT_SECRET; echo PATH=$PATH")
				req.Process.Envs = map[string]string{"A": "1"}
				r, err := start(ctx, c, req, nil)
				if err != nil || r.stdout.String() != "A=1\nSECRET=\nPATH=/usr/local/bin:/usr/bin:/bin\n" {
					t.Errorf("got %q, %v", r.stdout.String(), err)
				}
			})
			t.Run("streams before the end", func(t *testing.T) {
				// The process waits for input that is sent only after its
				// first line arrived: output must stream, not buffer.
				req := cmd("sh", "-c", "echo first; read x; echo got $x")
				yes := true
				req.Stdin = &yes
				r, err := start(ctx, c, req, func(r *result) {
					if strings.Contains(r.stdout.String(), "first") && !strings.Contains(r.stdout.String(), "got") {
						sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: r.pid}}
						in := &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("go\n")}}
						if _, err := c.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: in})); err != nil {
							t.Error(err)
						}
					}
				})
				if err != nil || r.stdout.String() != "first\ngot go\n" {
					t.Errorf("got %q, %v", r.stdout.String(), err)
				}
			})
			t.Run("timeout kills the process group", func(t *testing.T) {
				tctx, tcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer tcancel()
				// A loaded machine may not even deliver the start event
				// before the timeout, so the survivors are found by their
				// command line, not by a pid.
				secs := strconv.Itoa(100000 + os.Getpid()%1000 + len(codec))
				_, err := start(tctx, c, cmd("sh", "-c", "sleep "+secs+" & echo $!; sleep "+secs), nil)
				if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
					t.Fatalf("err = %v, want deadline exceeded", err)
				}
				// Killed at the timeout; this waits only for the kill to
				// land and the group's members to be reaped.
				for n := sleepers(secs); n > 0; n = sleepers(secs) {
					select {
					case <-ctx.Done():
						t.Fatalf("%d processes of the group survived its timeout", n)
					case <-time.After(10 * time.Millisecond):
					}
				}
			})
			t.Run("missing command", func(t *testing.T) {
				_, err := start(ctx, c, cmd("no-such-program"), nil)
				if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "no-such-program") {
					t.Errorf("err = %v", err)
				}
			})
			t.Run("unknown pid", func(t *testing.T) {
				sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 999999}}
				_, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
				if connect.CodeOf(err) != connect.CodeNotFound {
					t.Errorf("err = %v", err)
				}
			})
			t.Run("tag, list, connect, signal", func(t *testing.T) {
				tag := "job-" + codec
				req := cmd("sh", "-c", "echo ready; sleep 100")
				req.Tag = &tag
				done := make(chan *result, 1)
				go func() {
					r, _ := start(ctx, c, req, nil)
					done <- r
				}()
				sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}
				var conn *connect.ServerStreamForClient[processpb.ConnectResponse]
				for {
					var err error
					conn, err = c.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: sel}))
					if err == nil && conn.Receive() {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				defer conn.Close()
				if _, err := start(ctx, c, req, nil); connect.CodeOf(err) != connect.CodeAlreadyExists {
					t.Errorf("duplicate tag: %v", err)
				}
				list, err := c.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
				if err != nil || len(list.Msg.GetProcesses()) != 1 || list.Msg.GetProcesses()[0].GetTag() != tag {
					t.Fatalf("list = %v, %v", list, err)
				}
				if _, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGTERM})); err != nil {
					t.Fatal(err)
				}
				var end *processpb.ProcessEvent_EndEvent
				for conn.Receive() {
					if e := conn.Msg().GetEvent().GetEnd(); e != nil {
						end = e
					}
				}
				if end == nil || end.GetExited() || end.GetStatus() != "signal: terminated" || end.GetExitCode() != -1 {
					t.Errorf("attached stream's end = %v", end)
				}
				if r := <-done; r == nil || r.end == nil || r.end.GetExited() {
					t.Errorf("starting stream's end = %v", r)
				}
			})
		})
	}
}

// TestConcurrentOutputIsComplete runs many short processes at once on one
// thread: each one's output must arrive whole before its end event, however
// late the agent gets round to reading its pipes.
func TestConcurrentOutputIsComplete(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c := serve(t)["proto"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := strings.Repeat(fmt.Sprintf("process %d says hello\n", i), 50)
			r, err := start(ctx, c, cmd("sh", "-c", `i=0; while [ $i -lt 50 ]; do echo "process $0 says hello"; i=$((i+1)); done; echo bye >&2`, strconv.Itoa(i)), nil)
			if err != nil {
				t.Errorf("process %d: %v", i, err)
				return
			}
			if r.stdout.String() != want || r.stderr.String() != "bye\n" || r.end.GetExitCode() != 0 {
				t.Errorf("process %d: %d of %d stdout bytes, stderr %q, end %v", i, r.stdout.Len(), len(want), r.stderr.String(), r.end)
			}
		}()
	}
	wg.Wait()
}

// sleepers counts the live processes running "sleep secs" (zombies have no
// command line).
func sleepers(secs string) int {
	n := 0
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && bytes.HasSuffix(b, []byte("sleep\x00"+secs+"\x00")) {
			n++
		}
	}
	return n
}
