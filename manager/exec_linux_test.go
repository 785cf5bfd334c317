package manager_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

func TestExecution(t *testing.T) {
	testutil.RequireRoot(t)
	rt, err := local.New(&local.Options{Home: testutil.Home(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New(), MaxConcurrentExecutions: 2})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Track(s.ID)
	defer m.Stop(ctx, "alice", s.ID)

	t.Run("command", func(t *testing.T) {
		var streamed strings.Builder
		res, err := m.RunCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "echo $GREETING $EXTRA | tr a-z A-Z && echo oops >&2; exit 3", Env: map[string]string{"EXTRA": "there"}},
			func(stderr bool, b []byte) { streamed.Write(b) })
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != "HI THERE\n" || string(res.Stderr) != "oops\n" || res.ExitCode != 3 || !strings.Contains(streamed.String(), "HI THERE") {
			t.Errorf("got %q %q exit %d, streamed %q", res.Stdout, res.Stderr, res.ExitCode, streamed.String())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		_, err := m.RunCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "echo started; sleep 30", Timeout: 500 * time.Millisecond}, nil)
		if mcpbox.ErrorCode(err) != mcpbox.ETIMEOUT {
			t.Errorf("err = %v, want %s", err, mcpbox.ETIMEOUT)
		}
	})
	t.Run("concurrency limit", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := m.RunCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "sleep 0.5"}, nil)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		limited := 0
		for err := range errs {
			if mcpbox.ErrorCode(err) == mcpbox.ELIMIT {
				limited++
			} else if err != nil {
				t.Error(err)
			}
		}
		if limited != 1 {
			t.Errorf("%d of 3 concurrent executions refused, want 1 (limit 2)", limited)
		}
	})
	t.Run("background", func(t *testing.T) {
		h, err := m.StartCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "echo first; sleep 30; echo never"})
		if err != nil {
			t.Fatal(err)
		}
		var out *manager.CommandOutput
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if out, err = m.CommandOutput(ctx, "alice", s.ID, h); err != nil || len(out.Stdout) > 0 {
				break
			}
		}
		if err != nil || string(out.Stdout) != "first\n" || out.Done {
			t.Fatalf("output so far %+v, %v", out, err)
		}
		if _, err := m.CommandOutput(ctx, "bob", s.ID, h); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("bob reading alice's command: %v", err)
		}
		if err := m.StopCommand(ctx, "alice", s.ID, h); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !out.Done; time.Sleep(10 * time.Millisecond) {
			out, _ = m.CommandOutput(ctx, "alice", s.ID, h)
		}
		if !out.Done || strings.Contains(string(out.Stdout), "never") {
			t.Errorf("after stop: %+v", out)
		}
	})
	t.Run("code", func(t *testing.T) {
		collect := func(req manager.CodeRequest) (out, result, errName string) {
			err := m.ExecuteCode(ctx, "alice", s.ID, req, func(ev mcpbox.CodeEvent) {
				switch ev.Type {
				case "stdout":
					out += ev.Text
				case "result":
					result = ev.Text
				case "error":
					errName = ev.Error.Name
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		collect(manager.CodeRequest{Code: "import os\nx = 41"})
		if out, result, _ := collect(manager.CodeRequest{Code: "print(os.environ['GREETING'])\nx + 1"}); out != "hi\n" || result != "42" {
			t.Errorf("python state and session env: %q %q", out, result)
		}
		if _, _, errName := collect(manager.CodeRequest{Code: "while True: pass", Timeout: 500 * time.Millisecond}); errName != "KeyboardInterrupt" {
			t.Errorf("timeout: %q", errName)
		}
		if out, _, _ := collect(manager.CodeRequest{Code: "echo $GREETING", Language: "shell"}); out != "hi\n" {
			t.Errorf("shell: %q", out)
		}
		err := m.ExecuteCode(ctx, "alice", s.ID, manager.CodeRequest{Code: "1", Language: "cobol"}, nil)
		if mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("unknown language: %v", err)
		}
		err = m.ExecuteCode(ctx, "bob", s.ID, manager.CodeRequest{Code: "1"}, nil)
		if mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("bob executing in alice's session: %v", err)
		}
	})
	t.Run("files", func(t *testing.T) {
		if err := m.WriteFile(ctx, "alice", s.ID, "/workspace/dir/a.txt", []byte("data")); err != nil {
			t.Fatal(err)
		}
		b, err := m.ReadFile(ctx, "alice", s.ID, "/workspace/dir/a.txt")
		if err != nil || string(b) != "data" {
			t.Errorf("read %q, %v", b, err)
		}
		ents, err := m.ListFiles(ctx, "alice", s.ID, "/workspace", 2)
		if err != nil || len(ents) != 2 || filepath.Base(ents[1].Path) != "a.txt" {
			t.Errorf("list = %v, %v", ents, err)
		}
		if _, err := m.ReadFile(ctx, "alice", s.ID, "/workspace/missing"); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
			t.Errorf("missing file: %v", err)
		}
		if _, err := m.ReadFile(ctx, "bob", s.ID, "/workspace/dir/a.txt"); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("bob reading alice's file: %v", err)
		}
	})
}

// TestWarmPoolEnv checks that a session taken from a warm pool gets the
// caller's env in its kernels, though the pool started them without it.
func TestWarmPoolEnv(t *testing.T) {
	testutil.RequireRoot(t)
	rt, err := local.New(&local.Options{Home: testutil.Home(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New(), Pools: []manager.PoolSpec{{Flavor: "small", Size: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	go m.Run(ctx)
	var warm []*mcpbox.Sandbox
	for range 200 {
		if warm, _ = rt.List(ctx); len(warm) == 1 && m.PoolStats()["/small"] == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(warm) != 1 {
		t.Fatalf("the pool did not fill: %d sandboxes", len(warm))
	}
	testutil.Track(warm[0].ID)
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Env: map[string]string{"GREETING": "from the caller"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(ctx, "alice", s.ID)
	if s.ID != warm[0].ID {
		t.Fatalf("session %s did not come from the pool (%s)", s.ID, warm[0].ID)
	}
	var out strings.Builder
	err = m.ExecuteCode(ctx, "alice", s.ID, manager.CodeRequest{Code: "import os; print(os.environ['GREETING'])"}, func(ev mcpbox.CodeEvent) {
		if ev.Type == "stdout" {
			out.WriteString(ev.Text)
		}
	})
	if err != nil || out.String() != "from the caller\n" {
		t.Errorf("kernel of a warm session sees %q (%v), want the caller's env", out.String(), err)
	}
}
