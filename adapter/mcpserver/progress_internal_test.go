package mcpserver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProgressSlowClient: a client that does not read its progress
// notifications must not stall the output of the call that makes them,
// nor make the server hold that output without bound.
func TestProgressSlowClient(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	c := &call{send: func(_ context.Context, msg string) {
		<-release // a client that reads nothing until released
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10000 {
			c.output(ctx, "stdout", strings.Repeat("x", i%100)+"\n")
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("output stalled behind a client that reads no progress")
	}
	c.progressMu.Lock()
	held, dropped := c.pending.Len()+len(c.sendq)*maxProgressChunk, c.dropped
	c.progressMu.Unlock()
	if held > 65*maxProgressChunk || dropped == 0 {
		t.Errorf("held %d bytes, dropped %d messages: want a bounded queue that drops", held, dropped)
	}
	close(release)
	c.finishOutput(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || len(got) > 65 {
		t.Errorf("%d messages sent, want the queue's worth", len(got))
	}
}

// TestProgressChunks: one huge write goes out in bounded messages, in
// order.
func TestProgressChunks(t *testing.T) {
	ctx := context.Background()
	var got []string
	c := &call{send: func(_ context.Context, msg string) { got = append(got, msg) }}
	c.output(ctx, "stdout", strings.Repeat("a", 3*maxProgressChunk+10)+"\n")
	c.finishOutput(ctx)
	total := 0
	for _, m := range got {
		if len(m) > maxProgressChunk+len("stdout: ") {
			t.Errorf("a message of %d bytes", len(m))
		}
		total += len(strings.TrimPrefix(m, "stdout: "))
	}
	if len(got) != 4 || total != 3*maxProgressChunk+11 {
		t.Errorf("%d messages, %d bytes; want 4 holding all %d", len(got), total, 3*maxProgressChunk+11)
	}
}
