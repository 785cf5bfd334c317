package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/adapter/mcpserver"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// FuzzToolArguments calls every tool with arguments a caller controls.
// Whatever they are, the server answers — a result or a JSON-RPC error —
// without panicking or hanging, and an error result carries a structured
// error. Sandboxes cannot be created here (the fake runtime refuses), so
// no fuzzed code ever runs on the host.
func FuzzToolArguments(f *testing.F) {
	rt := testutil.NewFakeRuntime()
	rt.CreateErr = errors.New("no sandboxes while fuzzing")
	m, err := manager.New(context.Background(), &manager.Options{Runtime: rt, Store: memstore.New(), WarmKernel: noWarm})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Options{Manager: m})
	if err != nil {
		f.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.For("alice").Connect(ctx, st, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fuzz", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		f.Fatal(err)
	}
	for i := range tools.Tools {
		for _, args := range []string{`{}`, `{"code":"1","language":"python"}`, `{"session_id":"abc","path":"../../etc/passwd"}`,
			`{"session_id":"ZZ-bad","timeout":-1}`, `{"command":"ls","background":true,"timeout":1e308}`, `{"language":"cobol"}`,
			`{"ttl":"2h","flavor":"huge"}`, `{"session_id":"a","handle":"bgx"}`, `{"content":"\u0000","path":"/workspace/x"}`, `null`, `[1]`} {
			f.Add(uint8(i), []byte(args))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		name := tools.Tools[int(which)%len(tools.Tools)].Name
		if !json.Valid(args) {
			args = []byte(`{}`)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		if cctx.Err() != nil {
			t.Fatalf("%s %s: no answer within 10s", name, args)
		}
		if err != nil {
			return // a JSON-RPC error (invalid params): an answer
		}
		if res.IsError && res.StructuredContent == nil {
			t.Errorf("%s %s: an error result with no structured error: %+v", name, args, res.Content)
		}
	})
}
