package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// hostedSetup is a home, a config and a servers.json hosting the npm
// test servers (from this folder's node_modules, mapped read-only into
// each sandbox) and the stdlib Python server of package hosted.
type hostedSetup struct {
	bin, home, config, servers string
	env                        []string
}

func newHostedSetup(t *testing.T) *hostedSetup {
	t.Helper()
	node(t) // the npm packages are installed
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := &hostedSetup{bin: build(t), home: testutil.Home(t), config: filepath.Join(dir, "config.yaml"), servers: filepath.Join(dir, "servers.json")}
	if err := os.WriteFile(h.config, []byte(fmt.Sprintf("volume_roots: [%q]\n", here)), 0o600); err != nil {
		t.Fatal(err)
	}
	// PY_SECRET is in the CLI's environment: `--env PY_SECRET` takes it
	// from there, so the value is on no command line.
	h.env = []string{"MCPBOX_HOME=" + h.home, "MCPBOX_SERVERS_FILE=" + h.servers, "PY_SECRET=hunter2"}
	vol := filepath.Join(here, "node_modules") + ":/opt/mcp/node_modules:ro"
	pkg := "node /opt/mcp/node_modules/@modelcontextprotocol/"
	src, err := os.ReadFile("../hosted/testdata/server.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, add := range [][]string{
		{"everything", "--command", pkg + "server-everything/dist/index.js stdio", "--volume", vol, "--description", "MCP test server"},
		{"memory", "--command", pkg + "server-memory/dist/index.js", "--volume", vol, "--env", "MEMORY_FILE_PATH=/workspace/memory.json"},
		{"fs", "--command", pkg + "server-filesystem/dist/index.js /workspace", "--volume", vol},
		{"fsroot", "--command", pkg + "server-filesystem/dist/index.js /", "--volume", vol},
		{"py", "--command", `exec python3 -c "$SRC"`, "--env", "SRC=" + string(src), "--env", "PY_SECRET"},
	} {
		if out, errs, err := h.cli(t, "", append([]string{"server", "add"}, add...)...); err != nil || !strings.Contains(out, "Added server '"+add[0]+"'") {
			t.Fatalf("server add %s: %v\n%s%s", add[0], err, out, errs)
		}
	}
	return h
}

// cli runs mcpbox in process mode (url "") or against a serve.
func (h *hostedSetup) cli(t *testing.T, url string, args ...string) (string, string, error) {
	t.Helper()
	if len(args) > 0 && (args[0] == "tools" || args[0] == "server" || args[0] == "quick") {
		args = append(args, "--config", h.config)
	}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Env = append(cmd.Env, "MCPBOX_URL="+url)
	if url == "" {
		cmd.Env = append(cmd.Env[:len(cmd.Env)-1], "MCPBOX_URL=")
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), errb.String(), err
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("mcpbox %v did not end in 3 minutes\n%s%s", args, out.String(), errb.String())
		return "", "", nil
	}
}

func TestHostedCLI(t *testing.T) {
	testutil.RequireRoot(t)
	h := newHostedSetup(t)

	t.Run("server list", func(t *testing.T) {
		out, errs, err := h.cli(t, "", "server", "list", "--json")
		var list []struct {
			Name string   `json:"name"`
			Env  []string `json:"env"`
		}
		if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 5 {
			t.Fatalf("server list --json: %v\n%s%s", err, out, errs)
		}
		if strings.Contains(out, "hunter2") {
			t.Error("server list shows an env value")
		}
		if out, _, _ := h.cli(t, "", "server", "list"); !strings.Contains(out, "everything") || !strings.Contains(out, "MCP test server") {
			t.Errorf("server list:\n%s", out)
		}
	})
	t.Run("tools list", func(t *testing.T) {
		out, errs, err := h.cli(t, "", "tools", "list", "everything", "--json")
		if err != nil || !strings.Contains(out, `"name": "echo"`) || !strings.Contains(out, `"server_name": "everything"`) {
			t.Fatalf("tools list: %v\n%s%s", err, out, errs)
		}
		// Progress while the server starts.
		if !strings.Contains(errs, "starting everything") {
			t.Errorf("no start-up progress on stderr:\n%s", errs)
		}
	})
	t.Run("tools execute", func(t *testing.T) {
		out, errs, err := h.cli(t, "", "tools", "execute", "everything", "echo", "--param", "message=hello there")
		if err != nil || !strings.Contains(out, "hello there") {
			t.Fatalf("tools execute: %v\n%s%s", err, out, errs)
		}
		out, errs, err = h.cli(t, "", "tools", "execute", "everything", "get-sum", "--params", `{"a": 2}`, "--param", "b=40", "--json")
		if err != nil || !strings.Contains(out, "42") || !strings.Contains(out, `"content"`) {
			t.Fatalf("tools execute --json: %v\n%s%s", err, out, errs)
		}
		out, _, err = h.cli(t, "", "tools", "execute", "py", "env", "--param", "name=PY_SECRET")
		if err != nil || strings.TrimSpace(out) != "hunter2" {
			t.Errorf("the server's env: %q %v", out, err)
		}
		if _, errs, err := h.cli(t, "", "tools", "execute", "nosuch", "echo"); err == nil || !strings.Contains(errs, `no hosted server named "nosuch"`) {
			t.Errorf("unknown server: %v %s", err, errs)
		}
		if _, errs, err := h.cli(t, "", "tools", "execute", "everything", "echo", "--params", "[1]"); !exitCode(err, 2) {
			t.Errorf("bad --params: %v %s", err, errs)
		}
	})
	t.Run("filesystem stays in the sandbox", func(t *testing.T) {
		out, errs, err := h.cli(t, "", "tools", "execute", "fs", "write_file", "--params", `{"path": "/workspace/note.txt", "content": "in the sandbox"}`)
		if err != nil {
			t.Fatalf("write_file: %v\n%s%s", err, out, errs)
		}
		// A server given the whole filesystem still sees the sandbox's,
		// not the host's: servers.json exists on the host only.
		out, errs, err = h.cli(t, "", "tools", "execute", "fsroot", "read_text_file", "--param", "path="+h.servers)
		if !exitCode(err, 1) || strings.Contains(out, "hunter2") {
			t.Errorf("the host's servers.json from a hosted server: %v\n%s%s", err, out, errs)
		}
		out, _, err = h.cli(t, "", "tools", "execute", "fsroot", "list_directory", "--param", "path=/opt/mcp/node_modules/@modelcontextprotocol")
		if err != nil || !strings.Contains(out, "server-memory") {
			t.Errorf("the read-only volume: %v\n%s", err, out)
		}
	})
	t.Run("quick", func(t *testing.T) {
		src, _ := os.ReadFile("../hosted/testdata/server.py")
		out, errs, err := h.cli(t, "", "quick", `exec python3 -c "$SRC"`, "env", "--env", "SRC="+string(src), "--env", "Q=quick-env", "--param", "name=Q")
		if err != nil || strings.TrimSpace(out) != "quick-env" {
			t.Errorf("quick: %v\n%s%s", err, out, errs)
		}
	})
	t.Run("remove and config", func(t *testing.T) {
		if out, errs, err := h.cli(t, "", "server", "remove", "fsroot", "--yes"); err != nil || !strings.Contains(out, "Removed server 'fsroot'") {
			t.Errorf("server remove: %v\n%s%s", err, out, errs)
		}
		out, _, err := h.cli(t, "", "server", "config", "--show")
		if err != nil || !strings.Contains(out, h.servers) || strings.Contains(out, `"fsroot"`) || !strings.Contains(out, `"memory"`) {
			t.Errorf("config --show: %v\n%s", err, out)
		}
	})
}

func TestHostedServe(t *testing.T) {
	testutil.RequireRoot(t)
	n := node(t)
	h := newHostedSetup(t)
	s := &server{bin: h.bin, home: h.home, url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	p := s.startEnv(t, h.env, "--config", h.config, "--stop-sessions-on-exit")
	t.Cleanup(func() { p.stop(t) })

	t.Run("typescript-sdk", func(t *testing.T) {
		out, err := run(t, 5*time.Minute, append([]string{"MCPBOX_URL=" + s.url, "MCPBOX_BIN=" + h.bin, "MCPBOX_CONFIG=" + h.config}, h.env...),
			n, "--test", "--test-reporter=spec", "hosted.test.mjs")
		if err != nil {
			t.Fatalf("node --test hosted.test.mjs: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	})
	// The Inspector's own flags come first; for stdio the server's
	// command line follows "--", so that its --config stays its own.
	inspector := func(t *testing.T, target func([]string) []string, args ...string) (string, error) {
		return run(t, 2*time.Minute, nil, n, append([]string{"node_modules/.bin/inspector", "--cli"}, target(args)...)...)
	}
	for name, target := range map[string]func([]string) []string{
		"stdio": func(args []string) []string {
			return append(append([]string{"-e", "MCPBOX_HOME=" + h.home, "-e", "MCPBOX_SERVERS_FILE=" + h.servers}, args...), "--", h.bin, "mcp", "--config", h.config)
		},
		"streamable-http": func(args []string) []string { return append([]string{s.url + "/mcp", "--transport", "http"}, args...) },
	} {
		t.Run("inspector/"+name, func(t *testing.T) {
			out, err := inspector(t, target, "--method", "tools/list")
			if err != nil || !strings.Contains(out, `"memory__read_graph"`) || !strings.Contains(out, `"everything__echo"`) {
				t.Fatalf("tools/list: %v\n%.2000s", err, out)
			}
			out, err = inspector(t, target, "--method", "tools/call", "--tool-name", "everything__echo", "--tool-arg", "message=via "+name)
			if err != nil || !strings.Contains(out, "via "+name) {
				t.Fatalf("tools/call everything__echo: %v\n%s", err, out)
			}
		})
	}
	t.Run("cli against serve", func(t *testing.T) {
		out, errs, err := h.cli(t, s.url, "server", "list", "--json")
		if err != nil || !strings.Contains(out, `"memory"`) {
			t.Fatalf("server list: %v\n%s%s", err, out, errs)
		}
		out, errs, err = h.cli(t, s.url, "tools", "list", "memory")
		if err != nil || !strings.Contains(out, "create_entities") {
			t.Fatalf("tools list: %v\n%s%s", err, out, errs)
		}
		out, errs, err = h.cli(t, s.url, "tools", "execute", "everything", "trigger-long-running-operation", "--params", `{"duration": 0.5, "steps": 2}`)
		if err != nil || !strings.Contains(errs, "[2/2]") {
			t.Errorf("progress against serve: %v\n%s%s", err, out, errs)
		}
		src, _ := os.ReadFile("../hosted/testdata/server.py")
		// A server added beside the running serve is served at once.
		if _, errs, err := h.cli(t, "", "server", "add", "late", "--command", `exec python3 -c "$SRC"`, "--env", "SRC="+string(src), "--env", "L=late"); err != nil {
			t.Fatalf("server add: %v %s", err, errs)
		}
		out, errs, err = h.cli(t, s.url, "tools", "execute", "late", "env", "--param", "name=L")
		if err != nil || strings.TrimSpace(out) != "late" {
			t.Errorf("a server added while serve runs: %v %q %s", err, out, errs)
		}
		if _, errs, err := h.cli(t, "", "server", "remove", "late", "--yes"); err != nil {
			t.Fatalf("server remove: %v %s", err, errs)
		}
		if _, errs, err := h.cli(t, s.url, "tools", "execute", "late", "env"); err == nil || !strings.Contains(errs, `no hosted server named "late"`) {
			t.Errorf("a removed server still answers: %v %s", err, errs)
		}
		out, errs, err = h.cli(t, s.url, "quick", `exec python3 -c "$SRC"`, "env", "--env", "SRC="+string(src), "--env", "Q=remote", "--param", "name=Q")
		if err != nil || strings.TrimSpace(out) != "remote" {
			t.Errorf("quick against serve: %v\n%s%s", err, out, errs)
		}
	})
	t.Run("a crash is reported, then the server comes back", func(t *testing.T) {
		_, errs, err := h.cli(t, s.url, "tools", "execute", "py", "crash")
		if err == nil || !strings.Contains(errs, "dying on purpose") {
			t.Errorf("crash: %v\n%s", err, errs)
		}
		if out, errs, err := h.cli(t, s.url, "tools", "execute", "py", "count"); err != nil || strings.TrimSpace(out) != "1" {
			t.Errorf("after the crash: %v %q %s", err, out, errs)
		}
	})
	// Last: once a key exists, every caller needs one.
	t.Run("owners", func(t *testing.T) {
		keys := map[string]string{}
		for _, owner := range []string{"alice", "bob"} {
			out, errs, err := h.cli(t, "", "key", "create", "--owner", owner)
			if err != nil {
				t.Fatalf("key create: %v\n%s", err, errs)
			}
			keys[owner] = strings.TrimSpace(strings.Split(strings.TrimSpace(out), "\n")[0])
		}
		time.Sleep(1100 * time.Millisecond) // serve looks keys up at most once a second
		post := func(owner, path, body string) (int, string) {
			req, _ := http.NewRequest("POST", s.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+keys[owner])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := post("alice", "/v1/servers/memory/tools/create_entities", `{"entities": [{"name": "alices-secret", "entityType": "t", "observations": []}]}`); code != 200 {
			t.Fatalf("alice create_entities: %d %s", code, body)
		}
		if _, body := post("alice", "/v1/servers/memory/tools/read_graph", `{}`); !strings.Contains(body, "alices-secret") {
			t.Errorf("alice's graph: %s", body)
		}
		if code, body := post("bob", "/v1/servers/memory/tools/read_graph", `{}`); code != 200 || strings.Contains(body, "alices-secret") {
			t.Errorf("bob's graph: %d %s", code, body)
		}
		resp, err := http.Get(s.url + "/v1/servers")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/v1/servers without a key: %d", resp.StatusCode)
		}
	})
}
