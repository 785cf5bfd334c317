package kernel_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/agent/kernel"
)

// childKernel returns the pid of a python3 process this test started, or 0.
func childKernel(t *testing.T) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if s[open+1:end] == "python3" && len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
			return pid
		}
	}
	return 0
}

func TestPrestart(t *testing.T) {
	m := kernel.New(&kernel.Options{
		UID: os.Getuid(), GID: os.Getgid(), Home: t.TempDir(),
		Env: map[string]string{"PATH": path, "HOME": t.TempDir(), "LANG": "C.UTF-8"},
	})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { srv.Close(); m.Close() })
	if err := m.Prestart("cobol"); err == nil {
		t.Error("Prestart of an unknown language: no error")
	}
	if pid := childKernel(t); pid != 0 {
		t.Fatalf("a python3 child (%d) before Prestart", pid)
	}
	if err := m.Prestart("python"); err != nil {
		t.Fatal(err)
	}
	// The interpreter comes up with no execution asking for it...
	pid := 0
	for deadline := time.Now().Add(10 * time.Second); pid == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		pid = childKernel(t)
	}
	if pid == 0 {
		t.Fatal("no python3 kernel 10 s after Prestart")
	}
	// ...and the first execution in the default context runs in it.
	evs := run(t, srv.URL, "import os\nos.getpid()")
	if got := find(evs, "result"); got == nil || got["text"] != fmt.Sprint(pid) {
		t.Errorf("first execution ran in %v, want the prestarted kernel %d", got, pid)
	}
}
