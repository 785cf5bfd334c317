package hosted_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
)

// Example runs an MCP server from npm in a sandbox on this machine and
// calls one of its tools, as e2b-mcp's runner does — with no cloud, no
// sleep, and the server kept warm for the next call.
func Example() {
	ctx := context.Background()
	rt, err := local.New(nil) // sandboxes on this machine
	if err != nil {
		log.Fatal(err)
	}
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New()})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	h, err := hosted.New(&hosted.Options{Manager: m}) // File: "servers.json" to keep definitions
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	// From a struct, or from a map shaped like e2b-mcp's servers.json.
	err = h.Add(hosted.Server{
		Name:            "memory",
		Command:         "npx -y @modelcontextprotocol/server-memory",
		Env:             map[string]string{"MEMORY_FILE_PATH": "/workspace/memory.json"},
		InstallCommands: []string{"npm install -g @modelcontextprotocol/server-memory"},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = h.AddMap("filesystem", map[string]any{"command": "npx -y @modelcontextprotocol/server-filesystem /workspace"})
	if err != nil {
		log.Fatal(err)
	}

	tools, err := h.Tools(ctx, "alice", "memory", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(tools), "tools")

	// A session holds the server warm across calls.
	s, err := h.Open(ctx, "alice", "memory", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	_, err = s.Call(ctx, "create_entities", map[string]any{"entities": []map[string]any{{"name": "mcpbox", "entityType": "project", "observations": []string{}}}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := s.Call(ctx, "read_graph", nil, &hosted.CallOptions{OnProgress: func(p hosted.Progress) { fmt.Println("…", p.Message) }})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
}

// Example_servers shows definitions kept in servers.json, the Go API's
// equivalent of `mcpbox server add`, and a tool call on the test server.
func Example_servers() {
	ctx := context.Background()
	m, _ := manager.New(ctx, &manager.Options{Runtime: testutil.NewFakeRuntime(), Store: memstore.New(),
		WarmKernel: func(context.Context, http.RoundTripper) error { return nil }})
	dir, _ := os.MkdirTemp("", "hosted-example-")
	defer os.RemoveAll(dir)
	h, _ := hosted.New(&hosted.Options{Manager: m, File: filepath.Join(dir, "servers.json")})
	defer h.Close()

	src, _ := os.ReadFile("testdata/server.py")
	err := h.AddServers(map[string]map[string]any{
		"py": {"command": `exec python3 -c "$SRC"`, "env": map[string]any{"SRC": string(src), "GREETING": "hello"},
			"description": "a test server", "timeout_minutes": 5},
	})
	if err != nil {
		log.Fatal(err)
	}
	list, _ := h.Servers()
	for _, s := range list {
		fmt.Println(s.Name, "-", s.Description)
	}
	res, err := h.Call(ctx, "alice", "py", "env", map[string]any{"name": "GREETING"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// py - a test server
	// hello
}
