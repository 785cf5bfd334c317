package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/mcpbox/mcpbox/agent"
	"github.com/mcpbox/mcpbox/gen/processpb"
	"github.com/mcpbox/mcpbox/gen/processpb/processpbconnect"
)

func options(t *testing.T) *agent.Options {
	return &agent.Options{
		Env:  map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"},
		Root: t.TempDir(),
		Cwd:  t.TempDir(),
	}
}

// call sends a request to h and returns the status and the decoded JSON
// body (nil when there is none).
func call(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %d, body not JSON: %q", method, path, rec.Code, rec.Body.String())
		}
	}
	return rec.Code, out
}

func startTagged(ctx context.Context, t *testing.T, c processpbconnect.ProcessClient, tag, script string) *connect.ServerStreamForClient[processpb.StartResponse] {
	t.Helper()
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sh", Args: []string{"-c", script}}, Tag: &tag}
	stream, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil || !stream.Receive() {
		t.Fatalf("start %q: %v %v", tag, err, stream.Err())
	}
	return stream
}

// waitOutput polls GET …/output until its "done" is want.
func waitOutput(ctx context.Context, t *testing.T, h http.Handler, tag string) map[string]any {
	t.Helper()
	for {
		code, out := call(t, h, "GET", "/mcpbox/v1/processes/"+url.PathEscape(tag)+"/output", "")
		if code != http.StatusOK {
			t.Fatalf("output of %q: %d %v", tag, code, out)
		}
		if out["done"] == true {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%q never done: %v", tag, out)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestProcessRoutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := agent.New(options(t))
	defer a.Close()
	srv := httptest.NewServer(a)
	defer srv.Close()
	c := processpbconnect.NewProcessClient(srv.Client(), srv.URL)

	t.Run("finished", func(t *testing.T) {
		tag := "a/b c" // any string: path-escaped in the route
		stream := startTagged(ctx, t, c, tag, "echo out; printf '\\377' >&2; exit 2")
		pid := stream.Msg().GetEvent().GetStart().GetPid()
		for stream.Receive() {
		}
		stream.Close()
		out := waitOutput(ctx, t, a, tag)
		started, err := time.Parse(time.RFC3339, out["started"].(string))
		if err != nil || started.IsZero() {
			t.Errorf("started %v: %v", out["started"], err)
		}
		delete(out, "started")
		want := map[string]any{
			"tag": tag, "pid": float64(pid), "stdout": "out\n", "stderr": "\uFFFD",
			"stdout_dropped": 0.0, "stderr_dropped": 0.0,
			"done": true, "exit_code": 2.0, "exited": true, "status": "exit status 2",
		}
		if len(out) != len(want) {
			t.Errorf("fields %v, want %v", out, want)
		}
		for k, v := range want {
			if out[k] != v {
				t.Errorf("%s = %#v, want %#v", k, out[k], v)
			}
		}
		path := "/mcpbox/v1/processes/" + url.PathEscape(tag)
		if code, _ := call(t, a, "DELETE", path, ""); code != http.StatusNoContent {
			t.Errorf("DELETE: %d", code)
		}
		for _, method := range []string{"GET", "DELETE"} {
			p := path
			if method == "GET" {
				p += "/output"
			}
			if code, body := call(t, a, method, p, ""); code != http.StatusNotFound || body["message"] == "" {
				t.Errorf("%s after DELETE: %d %v, want 404 with a message", method, code, body)
			}
		}
	})
	t.Run("running", func(t *testing.T) {
		sctx, scancel := context.WithCancel(ctx)
		stream := startTagged(sctx, t, c, "long", "echo started; exec sleep 60")
		pid := stream.Msg().GetEvent().GetStart().GetPid()
		scancel() // the process outlives its stream
		stream.Close()
		for {
			_, out := call(t, a, "GET", "/mcpbox/v1/processes/long/output", "")
			if out["done"] != false {
				t.Fatalf("running process: %v", out)
			}
			if out["stdout"] == "started\n" {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no output: %v", out)
			case <-time.After(5 * time.Millisecond):
			}
		}
		if code, body := call(t, a, "DELETE", "/mcpbox/v1/processes/long", ""); code != http.StatusConflict || body["message"] == "" {
			t.Errorf("DELETE of a running process: %d %v, want 409", code, body)
		}
		syscall.Kill(int(pid), syscall.SIGKILL)
		if out := waitOutput(ctx, t, a, "long"); out["status"] != "signal: killed" || out["exited"] != false || out["exit_code"] != -1.0 {
			t.Errorf("killed: %v", out)
		}
	})
}

func TestDeadlineRoutes(t *testing.T) {
	in := time.Now().Add(time.Hour).UTC().Round(time.Millisecond)
	a := agent.New(&agent.Options{Root: t.TempDir(), Deadline: in})
	defer a.Close()
	if code, body := call(t, a, "GET", "/mcpbox/v1/deadline", ""); code != 200 || body["deadline"] != in.Format(time.RFC3339Nano) {
		t.Errorf("GET: %d %v, want %s", code, body, in.Format(time.RFC3339Nano))
	}
	later := in.Add(time.Hour)
	tests := []struct {
		name, body string
		code       int
		want       any // the deadline after, as JSON decodes it
	}{
		{"set", `{"deadline": "` + later.Format(time.RFC3339Nano) + `"}`, 200, later.Format(time.RFC3339Nano)},
		{"null clears", `{"deadline": null}`, 200, nil},
		{"set again", `{"deadline": "` + later.Format(time.RFC3339) + `"}`, 200, later.Truncate(time.Second).Format(time.RFC3339Nano)},
		{"zero clears", `{"deadline": "0001-01-01T00:00:00Z"}`, 200, nil},
		{"no field", `{}`, 400, nil},
		{"not JSON", `tomorrow`, 400, nil},
		{"not a time", `{"deadline": "tomorrow"}`, 400, nil},
		{"a number", `{"deadline": 5}`, 400, nil},
		{"too large", `{"deadline": "` + strings.Repeat(" ", 8<<10) + `"}`, 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, a, "PUT", "/mcpbox/v1/deadline", tt.body)
			if code != tt.code {
				t.Fatalf("PUT: %d %v, want %d", code, body, tt.code)
			}
			if code != 200 {
				if body["message"] == "" {
					t.Errorf("error without a message: %v", body)
				}
				return
			}
			if body["deadline"] != tt.want {
				t.Errorf("PUT answered %v, want %v", body["deadline"], tt.want)
			}
			if _, got := call(t, a, "GET", "/mcpbox/v1/deadline", ""); got["deadline"] != tt.want {
				t.Errorf("GET after PUT: %v, want %v", got["deadline"], tt.want)
			}
		})
	}
	select {
	case <-a.DeadlinePassed():
		t.Error("a deadline an hour away has passed")
	default:
	}

	t.Run("passed stands", func(t *testing.T) {
		a := agent.New(&agent.Options{Root: t.TempDir(), Deadline: time.Now().Add(-time.Second)})
		defer a.Close()
		<-a.DeadlinePassed()
		if code, _ := call(t, a, "PUT", "/mcpbox/v1/deadline", `{"deadline": null}`); code != http.StatusConflict {
			t.Errorf("PUT after the deadline: %d, want 409", code)
		}
	})
}

// TestServeEndsAtDeadline: when the deadline passes, Serve kills what it
// started and returns, so PID 1 and the sandbox end with it.
func TestServeEndsAtDeadline(t *testing.T) {
	tests := []struct {
		name string
		opts func(*agent.Options)
		set  bool // PUT the deadline instead
	}{
		{"from Options", func(o *agent.Options) { o.Deadline = time.Now().Add(300 * time.Millisecond) }, false},
		{"set by PUT", func(*agent.Options) {}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			opts := options(t)
			tt.opts(opts)
			served := make(chan error, 1)
			go func() { served <- agent.Serve(ctx, ln, opts) }()
			base := "http://" + ln.Addr().String()
			c := processpbconnect.NewProcessClient(http.DefaultClient, base)
			stream := startTagged(ctx, t, c, "sleeper", "exec sleep 60")
			defer stream.Close()
			pid := int(stream.Msg().GetEvent().GetStart().GetPid())
			if tt.set {
				body := `{"deadline": "` + time.Now().Add(300*time.Millisecond).Format(time.RFC3339Nano) + `"}`
				req, _ := http.NewRequestWithContext(ctx, "PUT", base+"/mcpbox/v1/deadline", strings.NewReader(body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("PUT: %d %s", resp.StatusCode, b)
				}
			}
			select {
			case err := <-served:
				if !errors.Is(err, agent.ErrDeadlinePassed) {
					t.Errorf("Serve returned %v, want ErrDeadlinePassed", err)
				}
			case <-ctx.Done():
				t.Fatal("Serve outlived its deadline")
			}
			for syscall.Kill(pid, 0) == nil {
				// Killed by now; this waits only for the reaper.
				select {
				case <-ctx.Done():
					t.Fatalf("process %d survived the deadline", pid)
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
}
