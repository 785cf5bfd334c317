package kernel_test

import (
	"strings"
	"testing"
)

func shell(t *testing.T, url, code string) []event {
	t.Helper()
	return execute(t, url, map[string]any{"code": code, "language": "shell"})
}

func TestShellState(t *testing.T) {
	url := serve(t, 0)
	shell(t, url, "mkdir -p proj && cd proj && export DEBUG=1 && alias ll='echo listed' && greet() { echo hello $1; }")
	evs := shell(t, url, "pwd; echo DEBUG=$DEBUG; ll; greet you")
	out := text(evs, "stdout")
	for _, want := range []string{"/proj\n", "DEBUG=1\n", "listed\n", "hello you\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("state lost: output lacks %q:\n%s", want, out)
		}
	}
	if find(evs, "error") != nil {
		t.Errorf("a cell that succeeded reported an error: %v", evs)
	}
}

func TestShellExitStatusAndOrder(t *testing.T) {
	url := serve(t, 0)
	evs := shell(t, url, "echo out; echo err >&2; false")
	if e := find(evs, "error"); e == nil || e["name"] != "ExitCode" || e["value"] != "1" {
		t.Errorf("exit status: %v", evs)
	}
	if text(evs, "stdout") != "out\n" || text(evs, "stderr") != "err\n" {
		t.Errorf("output %q / %q", text(evs, "stdout"), text(evs, "stderr"))
	}
	evs = execute(t, url, map[string]any{"code": "echo $FROM_REQUEST", "language": "shell", "env_vars": map[string]string{"FROM_REQUEST": "it's here"}})
	if got := text(evs, "stdout"); got != "it's here\n" {
		t.Errorf("env_vars: %q", got)
	}
}

func TestShellExitRestarts(t *testing.T) {
	url := serve(t, 0)
	shell(t, url, "export KEPT=1")
	evs := shell(t, url, "echo bye; exit 4")
	if e := find(evs, "error"); e == nil || e["name"] != "KernelExited" || find(evs, "unexpected_end_of_execution") == nil {
		t.Errorf("exit not reported: %v", evs)
	}
	if got := text(shell(t, url, "echo KEPT=${KEPT:-gone}"), "stdout"); got != "KEPT=gone\n" {
		t.Errorf("after exit: %q, want a fresh shell", got)
	}
}

func TestShellTimeout(t *testing.T) {
	url := serve(t, 0)
	shell(t, url, "export STATE=kept")
	evs := execute(t, url, map[string]any{"code": "sleep 30; echo after", "language": "shell", "timeout": 0.5})
	if e := find(evs, "error"); e == nil || e["value"] != "130" || strings.Contains(text(evs, "stdout"), "after") {
		t.Errorf("an interrupted cell must stop with status 130: %v", evs)
	}
	if got := text(shell(t, url, "echo $STATE"), "stdout"); got != "kept\n" {
		t.Errorf("state after an interrupted command: %q", got)
	}
}
