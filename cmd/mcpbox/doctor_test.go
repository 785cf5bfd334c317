package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

func TestDoctorJSON(t *testing.T) {
	var out, errb bytes.Buffer
	m := NewMain()
	m.Stdin, m.Stdout, m.Stderr = strings.NewReader(""), &out, &errb
	m.Home = testutil.Home(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := m.Run(ctx, []string{"doctor", "--json"})

	var got []finding
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("doctor --json (exit %d) printed no JSON array: %v\nstdout: %s\nstderr: %s", code, err, out.String(), errb.String())
	}
	byName := map[string]finding{}
	failed := false
	for _, f := range got {
		byName[f.Check] = f
		switch f.Status {
		case statusOK:
		case statusWarn, statusFail:
			failed = failed || f.Status == statusFail
			if f.Fix == "" {
				t.Errorf("%s: %s without a fix: %q", f.Check, f.Status, f.Detail)
			}
		default:
			t.Errorf("%s: status %q, want ok, warn or FAIL", f.Check, f.Status)
		}
		t.Logf("%-4s %-16s %s", f.Status, f.Check, f.Detail)
	}
	if want := map[bool]int{false: 0, true: 1}[failed]; code != want {
		t.Errorf("exit %d, want %d (any FAIL: %v)", code, want, failed)
	}
	for _, name := range []string{"os", "privileges", "user namespaces", "namespaces", "cgroups",
		"seccomp", "overlayfs", "state directory", "python3", "node", "sh", "bash"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("check %q missing from the report", name)
		}
	}

	if os.Geteuid() != 0 {
		t.Log("not root: skipping the assertions about this host's user namespaces and overlay")
		return
	}
	for _, name := range []string{"user namespaces", "overlayfs", "state directory", "privileges"} {
		if f := byName[name]; f.Status != statusOK {
			t.Errorf("as root, %s: %s %q (fix: %q), want ok", name, f.Status, f.Detail, f.Fix)
		}
	}
}

func TestDoctorText(t *testing.T) {
	code, out, _ := runMain(t, testutil.Home(t), "", "doctor")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < len(doctorChecks)+2 {
		t.Fatalf("doctor printed %d lines, want one per check and a summary:\n%s", len(lines), out)
	}
	for _, l := range lines[:len(doctorChecks)] {
		if s, _, _ := strings.Cut(l, " "); s != statusOK && s != statusWarn && s != statusFail {
			t.Errorf("line without a verdict: %q", l)
		}
	}
	sum := lines[len(lines)-1]
	if !strings.Contains(sum, " ok, ") || (code == 0) != strings.HasSuffix(sum, ", 0 FAIL") {
		t.Errorf("exit %d with summary %q", code, sum)
	}
}
