package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// TestStdioBadLines: `mcpbox mcp` answers a line that is not JSON-RPC
// with its JSON-RPC error and carries on with the next.
func TestStdioBadLines(t *testing.T) {
	home := testutil.Home(t)
	initialize := `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name, line string
		code       float64
		id         any
	}{
		{"bad json", "{bad json", -32700, nil},
		{"empty object", "{}", -32600, nil},
		{"bare value", `"str"`, -32600, nil},
		{"batch of numbers", "[1,2]", -32600, nil},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, -32600, nil},
		{"old version", `{"jsonrpc":"1.0","id":3,"method":"ping"}`, -32600, 3.0},
		{"too long", `{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`, -32700, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MCPBOX_MAX_BODY_MB", "1")
			// stdin stays open until both replies are out, as a client's
			// does: at end of input the server stops, answered or not.
			pr, pw := io.Pipe()
			out := &syncBuf{}
			m := &Main{Stdin: pr, Stdout: out, Stderr: io.Discard, Home: home}
			done := make(chan int, 1)
			go func() { done <- m.Run(context.Background(), []string{"mcp"}) }()
			go func() { io.WriteString(pw, tc.line+"\n"+initialize+"\n") }()
			deadline := time.Now().Add(20 * time.Second)
			for strings.Count(out.String(), "\n") < 2 && time.Now().Before(deadline) {
				select {
				case code := <-done:
					t.Fatalf("mcpbox mcp exited %d on a bad line; it wrote:\n%s", code, out.String())
				case <-time.After(10 * time.Millisecond):
				}
			}
			pw.Close()
			if code := <-done; code != 0 {
				t.Errorf("mcpbox mcp exited %d at the end of its input", code)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("%d replies, want 2 (the error, then initialize's):\n%s", len(lines), out)
			}
			var bad struct {
				ID    any
				Error struct {
					Code    float64
					Message string
				}
			}
			json.Unmarshal([]byte(lines[0]), &bad)
			if bad.Error.Code != tc.code || bad.ID != tc.id || bad.Error.Message == "" {
				t.Errorf("reply to the bad line: %s; want code %v, id %v", lines[0], tc.code, tc.id)
			}
			if !strings.Contains(lines[1], `"id":7,"result"`) {
				t.Errorf("initialize after the bad line: %s", lines[1])
			}
		})
	}
}

// FuzzStdioFilter: whatever a stdio client sends, the filter never
// panics, forwards only lines that are JSON-RPC messages, and answers the
// rest with JSON.
func FuzzStdioFilter(f *testing.F) {
	for _, s := range []string{
		"{bad json\n", "{}\n", "[1,2]\n", `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n",
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"x"}]` + "\n",
		"\n\n\r\n", `{"jsonrpc":"2.0","id":1.5,"result":{}}`, "\x00\xff\n", strings.Repeat("[", 5000) + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		fl := newStdioFilter(bytes.NewReader(in), &lockedWriter{w: &out}, 4096)
		fwd, err := io.ReadAll(fl)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(fwd)), "\n") {
			if line == "" {
				continue
			}
			if _, code, _ := check([]byte(line)); code != 0 {
				t.Errorf("forwarded a line that is not JSON-RPC: %q", line)
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if line != "" && !json.Valid([]byte(line)) {
				t.Errorf("an error reply is not JSON: %q", line)
			}
		}
	})
}

// syncBuf is a buffer written by the server while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
