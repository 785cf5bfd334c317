package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAgentCommand: `mcpbox agent` serves envd and the code interpreter
// on its --listen address, with the cwd and env it was given, until its
// context ends.
func TestAgentCommand(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cwd := t.TempDir()
	m := &Main{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- m.Run(ctx, []string{"agent", "--listen", addr, "--cwd", cwd, "--env", "GREETING=hi", "--env", "PATH=/usr/bin:/bin"})
	}()
	base := "http://" + addr
	for i := 0; ; i++ {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				break
			}
		}
		if i == 200 {
			t.Fatalf("the agent did not answer /health: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	resp, err := http.Post(base+"/execute", "application/json",
		bytes.NewReader([]byte(`{"code": "echo $GREETING; pwd", "language": "shell"}`)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var stdout strings.Builder
	last := ""
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var ev struct{ Type, Text string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("bad /execute line %q: %v", line, err)
		}
		if ev.Type == "stdout" {
			stdout.WriteString(ev.Text)
		}
		last = ev.Type
	}
	if stdout.String() != "hi\n"+cwd+"\n" || last != "end_of_execution" {
		t.Errorf("/execute through `mcpbox agent` printed %q and ended with %q:\n%s", stdout.String(), last, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("mcpbox agent exited %d after its context ended", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("mcpbox agent did not stop when its context ended")
	}
}
