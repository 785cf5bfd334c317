package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// stdio is `mcpbox mcp` with a go-sdk client on its pipes.
type stdio struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	cs    *mcp.ClientSession
	done  chan struct{}
}

func startStdio(t *testing.T, bin, home string, opts *mcp.ClientOptions) *stdio {
	t.Helper()
	return startStdioOpts(t, bin, []string{"MCPBOX_HOME=" + home}, opts)
}

// startStdioEnv starts `mcpbox mcp args…` with env added to its
// environment.
func startStdioEnv(t *testing.T, bin string, env []string, args ...string) *stdio {
	t.Helper()
	return startStdioOpts(t, bin, env, nil, args...)
}

func startStdioOpts(t *testing.T, bin string, env []string, opts *mcp.ClientOptions, args ...string) *stdio {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &syncBuffer{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &stdio{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("mcpbox mcp stderr:\n%s", cmd.Stderr.(*syncBuffer).String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.cs, err = mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, opts).
		Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// call runs a tool and returns its structured result, failing the test on
// any error.
func (p *stdio) call(t *testing.T, name string, args map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s %v: %v %+v", name, args, err, res)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out
}

// TestStdioClientGone checks that when a stdio client goes away in the
// middle of a call, the code stops running in the sandbox, mcpbox mcp
// exits, and the session keeps its state for the next client.
func TestStdioClientGone(t *testing.T) {
	testutil.RequireRoot(t)
	bin := build(t)
	home := testutil.Home(t)

	started := make(chan struct{}, 1)
	first := startStdio(t, bin, home, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case started <- struct{}{}:
			default:
			}
		},
	})
	id := first.call(t, "create_session", nil)["session_id"].(string)
	t.Cleanup(func() {
		last := startStdio(t, bin, home, nil)
		last.call(t, "stop_session", map[string]any{"session_id": id})
	})
	first.call(t, "execute_code", map[string]any{"session_id": id, "code": "x = 42"})

	// A loop that leaves a mark every 10 ms for a minute, then changes x.
	// It says it started once the first mark is on disk.
	loop := "import time\nfor i in range(6000):\n" +
		"    with open('/tmp/ticks', 'a') as f: f.write('.')\n" +
		"    if i == 0: print('started', flush=True)\n    time.sleep(0.01)\nx = 99\n"
	params := &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": id, "code": loop, "timeout": 120}}
	params.SetProgressToken("loop")
	callErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		_, err := first.cs.CallTool(ctx, params)
		callErr <- err
	}()
	select {
	case <-started:
	case err := <-callErr:
		t.Fatalf("the loop ended before it started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no progress from the loop in 30 s")
	}

	// The client goes away: its end of the pipe closes.
	first.stdin.Close()
	select {
	case <-first.done:
	case <-time.After(15 * time.Second):
		t.Fatal("mcpbox mcp still runs 15 s after its client went away")
	}
	select {
	case err := <-callErr:
		if err == nil {
			t.Error("the call whose client went away returned a result")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the client's pending call did not end")
	}

	next := startStdio(t, bin, home, nil)
	read := func() int {
		out := next.call(t, "read_file", map[string]any{"session_id": id, "path": "/tmp/ticks"})
		return len(out["content"].(string))
	}
	before := read()
	time.Sleep(500 * time.Millisecond)
	if after := read(); after != before {
		t.Errorf("the loop still runs after its client went away: %d marks, then %d", before, after)
	}
	if before == 0 || before >= 6000 {
		t.Errorf("%d marks: the loop did not run, or ran to its end", before)
	}
	out := next.call(t, "execute_code", map[string]any{"session_id": id, "code": "print(x)"})
	if s, _ := out["stdout"].(string); strings.TrimSpace(s) != "42" {
		t.Errorf("x after the interrupted call: %q, want 42 (state kept, the loop's end never ran)", s)
	}
}

// TestStdioErrorsInWords checks that `mcpbox mcp`, as Claude Desktop runs
// it, answers bad arguments with the words the other paths use.
func TestStdioErrorsInWords(t *testing.T) {
	testutil.RequireRoot(t)
	p := startStdio(t, build(t), testutil.Home(t), nil)
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"code": "1", "language": "ruby"}, `language must be one of python, javascript or shell, not "ruby"`},
		{map[string]any{"code": "1", "timeout": 0}, "timeout must be from 1 to 3600 seconds, not 0"},
		{map[string]any{"code": "echo", "language": "shell", "event": 1}, "event (handler mode) works with language python or javascript, not shell"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: tc.args})
		cancel()
		if err != nil || !res.IsError {
			t.Fatalf("%v: %v %+v", tc.args, err, res)
		}
		var out map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		if out["error_code"] != "INVALID_ARGUMENT" || !strings.Contains(fmt.Sprint(out["message"]), tc.want) {
			t.Errorf("%v: %v", tc.args, out)
		}
	}
}
