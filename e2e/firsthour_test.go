package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// The tests in this file follow a new user's first hour with the CLI
// (issue 12), asserting what the user reads and the exit codes.

// cli runs the mcpbox binary with env and returns its exit code, stdout
// and stderr.
func cli(t *testing.T, bin string, env []string, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// TestCLIFirstHour drives `mcpbox exec`, `session`, `key` and serve's
// Ctrl-C as the README shows them.
func TestCLIFirstHour(t *testing.T) {
	testutil.RequireRoot(t)
	bin := build(t)
	s := &server{bin: bin, home: testutil.Home(t)}
	s.url = "http://127.0.0.1:" + itoa(freePort(t))
	p := s.start(t) // without --stop-sessions-on-exit, as `make run` starts it
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			p.stop(t)
		}
		// Whatever was kept: the way the shutdown message says.
		q := s.start(t, "--stop-sessions-on-exit")
		q.stop(t)
	})
	env := []string{"MCPBOX_HOME=" + s.home, "MCPBOX_URL=" + s.url}
	dir := t.TempDir()
	sessions := func() []map[string]any {
		t.Helper()
		code, out, errOut := cli(t, bin, env, dir, "session", "ls", "--json")
		var list []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("session ls: exit %d, %q %q", code, out, errOut)
		}
		return list
	}

	t.Run("exec cleans up after itself", func(t *testing.T) {
		code, out, errOut := cli(t, bin, env, dir, "exec", "print(6*7)")
		if code != 0 || out != "42\n" || strings.Contains(errOut, "session:") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, _, _ = cli(t, bin, env, dir, "exec", "1/0")
		if code != 1 {
			t.Errorf("a raise: exit %d, want 1", code)
		}
		// Exits pass their status through, as with mcpbox run.
		code, out, errOut = cli(t, bin, env, dir, "exec", "-l", "shell", "echo before; exit 3")
		if code != 3 || out != "before\n" || strings.Contains(errOut, "ExitCode") {
			t.Errorf("shell exit: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, out, errOut = cli(t, bin, env, dir, "exec", "print('bye')\nimport sys\nsys.exit(7)")
		if code != 7 || out != "bye\n" || strings.Contains(errOut, "Traceback") {
			t.Errorf("sys.exit: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if l := sessions(); len(l) != 0 {
			t.Errorf("one-off execs left %d sessions: %v", len(l), l)
		}
	})

	var kept string
	t.Run("exec --keep", func(t *testing.T) {
		code, _, errOut := cli(t, bin, env, dir, "exec", "--keep", "x = 41")
		m := regexp.MustCompile(`session: ([a-z0-9]+)`).FindStringSubmatch(errOut)
		if code != 0 || m == nil {
			t.Fatalf("exit %d, stderr %q: want the kept session's id", code, errOut)
		}
		kept = m[1]
		if code, out, _ := cli(t, bin, env, dir, "exec", "--session", kept, "print(x + 1)"); code != 0 || out != "42\n" {
			t.Errorf("the kept session: exit %d, %q", code, out)
		}
		// ls says both deadlines: if unused, and at the latest.
		_, out, _ := cli(t, bin, env, dir, "session", "ls")
		if !strings.Contains(out, "EXPIRES IF UNUSED") || !strings.Contains(out, "ENDS BY") || !strings.Contains(out, kept) {
			t.Errorf("session ls:\n%s", out)
		}
	})

	t.Run("exec writes plots as files", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
			t.Skip("the host's python3 has no matplotlib (apt-get install python3-matplotlib)")
		}
		imgs := t.TempDir()
		code, _, errOut := cli(t, bin, env, dir, "exec", "--image-dir", imgs, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
		want := filepath.Join(imgs, "mcpbox-plot-1.png")
		if code != 0 || errOut != "mcpbox: image/png written to "+want+"\n" {
			t.Fatalf("exit %d, stderr %q; want only the image's path", code, errOut)
		}
		f, err := os.Open(want)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s is not a PNG: %v", want, err)
		}
	})

	t.Run("argument errors in words", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"exec", "-l", "ruby", "1"}, `unknown language "ruby"`},
			{[]string{"exec", "--timeout", "0s", "1"}, "timeout must be above 0"},
			{[]string{"session", "create", "--ttl", "soon"}, `--ttl: "soon" is not a length of time: give seconds (7200) or a duration such as 2h`},
		} {
			code, _, errOut := cli(t, bin, env, dir, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
			}
		}
	})

	t.Run("hints name commands, not tools", func(t *testing.T) {
		code, _, errOut := cli(t, bin, env, dir, "session", "rm", "nosuchsession")
		if code != 2 || !strings.Contains(errOut, "`mcpbox session ls`") || strings.Contains(errOut, "get_sessions") {
			t.Errorf("exit %d, %q", code, errOut)
		}
	})

	t.Run("ttl in seconds or as a duration", func(t *testing.T) {
		for _, ttl := range []string{"7200", "2h"} {
			code, out, errOut := cli(t, bin, env, dir, "session", "create", "--ttl", ttl)
			id := strings.TrimSpace(out)
			if code != 0 || id == "" || strings.Contains(id, " ") {
				t.Fatalf("--ttl %s: exit %d, %q %q", ttl, code, out, errOut)
			}
			if !strings.Contains(errOut, "at the latest (its ttl), and sooner if unused") {
				t.Errorf("--ttl %s: stderr %q does not say both deadlines", ttl, errOut)
			}
			cli(t, bin, env, dir, "session", "rm", id)
		}
	})

	t.Run("session create with a template and a network", func(t *testing.T) {
		code, _, errOut := cli(t, bin, env, dir, "session", "create", "--template", "nosuchtemplate")
		if code != 2 || !strings.Contains(errOut, `unknown template "nosuchtemplate"`) {
			t.Errorf("an unknown template: exit %d, %q", code, errOut)
		}
		code, out, errOut := cli(t, bin, env, dir, "session", "create", "--template", "base", "--allow", "pypi.org", "--deny", "evil.example")
		id := strings.TrimSpace(out)
		if code != 0 || id == "" {
			t.Fatalf("create --allow: exit %d, %q %q", code, out, errOut)
		}
		defer cli(t, bin, env, dir, "session", "rm", id)
		_, out, _ = cli(t, bin, env, dir, "session", "ls", "--json")
		var list []struct {
			SessionID string `json:"session_id"`
			Network   string `json:"network"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("session ls --json: %v: %q", err, out)
		}
		network := "(not listed)"
		for _, s := range list {
			if s.SessionID == id {
				network = s.Network
			}
		}
		if !strings.Contains(network, "pypi.org") || !strings.Contains(network, "evil.example") {
			t.Errorf("session %s has network %q, want its allow and deny lists", id, network)
		}
	})

	t.Run("keys: missing, refused, revoked", func(t *testing.T) {
		code, out, errOut := cli(t, bin, env, dir, "key", "create", "--owner", "alice")
		key := strings.TrimSpace(out)
		if code != 0 || key == "" {
			t.Fatalf("key create: exit %d, %q %q", code, out, errOut)
		}
		time.Sleep(1100 * time.Millisecond) // the server rechecks for keys once a second
		if code, out, _ := cli(t, bin, append(env, "MCPBOX_API_KEY="+key), dir, "exec", "print(1)"); code != 0 || out != "1\n" {
			t.Errorf("with the key: exit %d, %q", code, out)
		}
		_, _, errOut = cli(t, bin, env, dir, "exec", "print(1)")
		if !strings.Contains(errOut, "needs an API key") || strings.Contains(errOut, "cannot reach") {
			t.Errorf("no key: %q", errOut)
		}
		_, _, errOut = cli(t, bin, append(env, "MCPBOX_API_KEY=mcpbox_wrong"), dir, "exec", "print(1)")
		if !strings.Contains(errOut, "refused the API key in MCPBOX_API_KEY: it is unknown or has been revoked") || strings.Contains(errOut, "cannot reach") {
			t.Errorf("a wrong key: %q", errOut)
		}
		_, out, _ = cli(t, bin, env, dir, "key", "list", "--json")
		var keys []struct{ ID string }
		json.Unmarshal([]byte(out), &keys)
		for _, k := range keys {
			cli(t, bin, env, dir, "key", "revoke", k.ID)
		}
		time.Sleep(1100 * time.Millisecond)
		// No live key is left: the server is open again, so the revoked
		// key is refused only while another key lives. Make one.
		cli(t, bin, env, dir, "key", "create", "--owner", "bob")
		time.Sleep(1100 * time.Millisecond)
		_, _, errOut = cli(t, bin, append(env, "MCPBOX_API_KEY="+key), dir, "exec", "print(1)")
		if !strings.Contains(errOut, "refused the API key") || strings.Contains(errOut, "cannot reach") {
			t.Errorf("a revoked key: %q", errOut)
		}
		// The server still answers an unreachable URL differently.
		_, _, errOut = cli(t, bin, []string{"MCPBOX_URL=http://127.0.0.1:" + itoa(freePort(t))}, dir, "exec", "print(1)")
		if !strings.Contains(errOut, "cannot reach mcpbox") {
			t.Errorf("no server: %q", errOut)
		}
	})

	t.Run("ctrl-c says what it left running", func(t *testing.T) {
		if kept == "" {
			t.Skip("no session was kept")
		}
		p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not exit 20 s after Ctrl-C")
		}
		stopped = true
		log := p.log.String()
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("serve exited %d after Ctrl-C, want 0", code)
		}
		for _, want := range []string{"interrupted; shutting down", "left running", kept, "to stop them now, run `mcpbox serve --stop-sessions-on-exit`"} {
			if !strings.Contains(log, want) {
				t.Errorf("shutdown log lacks %q:\n%s", want, log)
			}
		}
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			t.Error("serve still answers after Ctrl-C")
		}
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestMakeRun runs `make run` as the README says, and checks that it
// serves the version `make build` stamps, that every endpoint `make help`
// advertises exists, and that Ctrl-C stops it without an error from make.
// It builds ./bin/mcpbox in the repository, as `make build` does.
func TestMakeRun(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed (apt-get install make)")
	}
	home := testutil.Home(t)
	port := itoa(freePort(t))
	help, err := exec.Command("make", "-s", "-C", "..", "help").Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	m := regexp.MustCompile(`make build +build \./bin/mcpbox, version (\S+)`).FindSubmatch(help)
	if m == nil {
		t.Fatalf("make help does not say which version make build stamps:\n%s", help)
	}
	version := string(m[1])

	cmd := exec.Command("make", "-s", "-C", "..", "run", "ARGS=--port "+port)
	cmd.Env = append(os.Environ(), "MCPBOX_HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C goes to the whole group
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("make run:\n%s", log.String())
		}
	})
	url := "http://127.0.0.1:" + port
	var health struct{ Version string }
	for i := 0; ; i++ {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&health)
			resp.Body.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("make run ended before serving")
		case <-time.After(200 * time.Millisecond):
		}
		if i > 1500 {
			t.Fatal("make run did not serve within 5 minutes")
		}
	}
	if health.Version != version {
		t.Errorf("make run serves version %q, make build stamps %q", health.Version, version)
	}

	// Every path make help names answers (a 404 would be an endpoint that
	// does not exist).
	runLine := regexp.MustCompile(`(?m)^make run .*$`).Find(help)
	paths := regexp.MustCompile(`(?::8080|[\s(,])(/[a-z]+)`).FindAllSubmatch(runLine, -1)
	if len(paths) < 3 {
		t.Fatalf("make help names only %d endpoints:\n%s", len(paths), help)
	}
	for _, p := range paths {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+string(p[1]), nil)
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", p[1], err)
		} else {
			if resp.StatusCode == http.StatusNotFound {
				t.Errorf("make help advertises %s, which is a 404", p[1])
			}
			resp.Body.Close()
		}
		cancel()
	}

	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("make run still runs 30 s after Ctrl-C")
	}
	out := log.String()
	for _, want := range []string{"interrupted; shutting down", "no sessions left running"} {
		if !strings.Contains(out, want) {
			t.Errorf("make run's output lacks %q", want)
		}
	}
	if strings.Contains(out, "make: ***") {
		t.Errorf("make reported an error after Ctrl-C:\n%s", out)
	}
}

// TestServeSecondInterrupt: while serve shuts down (an open SSE stream
// holds it for up to 5 s), a second Ctrl-C ends it at once, saying so.
func TestServeSecondInterrupt(t *testing.T) {
	testutil.RequireRoot(t)
	s := &server{bin: build(t), home: testutil.Home(t)}
	s.url = "http://127.0.0.1:" + itoa(freePort(t))
	p := s.start(t)
	t.Cleanup(func() { p.stop(t) })
	resp, err := http.Get(s.url + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	p.cmd.Process.Signal(syscall.SIGINT)
	for !strings.Contains(p.log.String(), "shutting down") {
		select {
		case <-p.done:
			t.Fatalf("serve exited before its shutdown waited for the stream:\n%s", p.log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve still runs after a second Ctrl-C")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(p.log.String(), "interrupted again; exiting now") {
		t.Errorf("exit %d after a second Ctrl-C:\n%s", code, p.log.String())
	}
}
