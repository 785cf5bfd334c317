package manager_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// readUntil collects a Stdio's stdout and stderr until want appears in
// stdout or the process ends.
func readUntil(t *testing.T, s *manager.Stdio, want string) (stdout, stderr string, end *manager.ProcessEnd) {
	t.Helper()
	var out, errb bytes.Buffer
	for !strings.Contains(out.String(), want) {
		o, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(o.Stdout)
		errb.Write(o.Stderr)
		if o.End != nil {
			return out.String(), errb.String(), o.End
		}
	}
	return out.String(), errb.String(), nil
}

func TestStdio(t *testing.T) {
	m, _, _ := newManager(t, manager.Options{})
	ctx := context.Background()
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Env: map[string]string{"FROM_SESSION": "s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("conversation", func(t *testing.T) {
		// A line-by-line echo that also proves env arrived and stderr is apart.
		p, err := m.StartStdio(ctx, "alice", s.ID, manager.StdioRequest{
			Command: `while read -r l; do echo "got $l"; done; echo bye`,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i, line := range []string{"one", "two", strings.Repeat("x", 100000)} {
			if err := p.Write(ctx, []byte(line+"\n")); err != nil {
				t.Fatal(err)
			}
			out, _, end := readUntil(t, p, "got "+line+"\n")
			if end != nil || !strings.HasSuffix(out, "got "+line+"\n") {
				t.Fatalf("line %d: stdout %.80q, end %v", i, out, end)
			}
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		out, _, end := readUntil(t, p, "\x00never")
		if !strings.Contains(out, "bye") || end == nil || end.ExitCode != 0 || !end.Exited {
			t.Errorf("after EOF: stdout %q, end %+v", out, end)
		}
		if _, err := p.Next(); err != io.EOF {
			t.Errorf("Next after the end = %v, want io.EOF", err)
		}
	})
	t.Run("stderr and env", func(t *testing.T) {
		p, err := m.StartStdio(ctx, "alice", s.ID, manager.StdioRequest{Command: `echo "env $FROM_SESSION $SECRET" >&2; exit 3`,
			Env: map[string]string{"SECRET": "hunter2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_, errs, end := readUntil(t, p, "\x00never")
		if errs != "env s hunter2\n" || end == nil || end.ExitCode != 3 {
			t.Errorf("stderr %q, end %+v", errs, end)
		}
	})
	t.Run("close kills", func(t *testing.T) {
		p, err := m.StartStdio(ctx, "alice", s.ID, manager.StdioRequest{Command: `trap '' TERM; echo up; sleep 300`})
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, p, "up\n")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := p.Next(); err != nil {
					return
				}
			}
		}()
		p.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the output stream did not end after Close")
		}
	})
	t.Run("other owner", func(t *testing.T) {
		_, err := m.StartStdio(ctx, "bob", s.ID, manager.StdioRequest{Command: "cat"})
		if mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("bob starting in alice's session: %v, want %s", err, mcpbox.ESESSION)
		}
	})
	t.Run("empty command", func(t *testing.T) {
		_, err := m.StartStdio(ctx, "alice", s.ID, manager.StdioRequest{})
		if mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("empty command: %v, want %s", err, mcpbox.EINVALID)
		}
	})
	t.Run("ended session", func(t *testing.T) {
		p, err := m.StartStdio(ctx, "alice", s.ID, manager.StdioRequest{Command: "cat"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := m.Stop(ctx, "alice", s.ID); err != nil {
			t.Fatal(err)
		}
		if err := p.Write(ctx, []byte("x\n")); mcpbox.ErrorCode(err) != mcpbox.ESESSION {
			t.Errorf("write after the session ended: %v, want %s", err, mcpbox.ESESSION)
		}
	})
}
