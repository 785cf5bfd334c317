//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox/internal/testutil"
	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary allocate memory instead of running tests
// (see allocate).
const helperEnv = "MCPBOX_CGROUP_TEST_HELPER"

// testPrefix is the parent of every group the tests make.
const testPrefix = "mcpbox-test"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "alloc" {
		os.Exit(allocate())
	}
	// Processes orphaned in a test (a shell's children when it is killed)
	// come to us, not to the host's init, so reap can collect them before
	// CheckLeaks looks.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	code := m.Run()
	for _, leak := range testutil.CheckLeaks() {
		fmt.Fprintln(os.Stderr, "leak:", leak)
		code = 1
	}
	for _, h := range hostLayout().hierarchies {
		unix.Rmdir(filepath.Join(h.root, testPrefix)) // best effort: only if empty
	}
	os.Exit(code)
}

// allocate waits for a line on stdin (the test moves it into a group
// first), then touches 200 MiB.
func allocate() int {
	bufio.NewReader(os.Stdin).ReadString('\n')
	b := make([]byte, 200<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("allocated", len(b))
	return 0
}

// newGroup creates a fresh group for t and removes it, with anything still
// in it, when t ends.
func newGroup(t testing.TB, l Limits) *Group {
	t.Helper()
	testutil.RequireRoot(t)
	g, err := New(testPrefix+"/"+testutil.ID(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Kill(); err != nil {
			t.Error(err)
		}
		reap()
		if err := g.Delete(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// reap collects our exited children, orphans included, for up to a second.
// Kill returns once the group is empty, which can be a moment before its
// processes become zombies.
func reap() {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		if err == unix.ECHILD {
			return
		}
		if pid <= 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// start runs name with args, moves it into g and returns it; its stdin is
// a pipe the process may wait on until it is in the group. The process is
// killed and waited for when t ends, before the group is removed.
func start(t *testing.T, g *Group, name string, args ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(name, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin
}

func TestProbe(t *testing.T) {
	info := Probe()
	if want := versionFromMounts(t); info.Version != want {
		t.Errorf("Version = %q, want %q from /proc/self/mounts", info.Version, want)
	}
	if info.Version == "hybrid" && info.Unified != "/sys/fs/cgroup/unified" {
		t.Errorf("Unified = %q on a hybrid host", info.Unified)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		t.Run(c, func(t *testing.T) {
			testutil.RequireRoot(t)
			if !info.Controllers[c] {
				t.Errorf("Controllers[%q] = false as root; got %v", c, info.Controllers)
			}
		})
	}
}

// versionFromMounts classifies the host from the mount table, independently
// of Probe's statfs checks.
func versionFromMounts(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var v1, v2, v2root bool
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[1], "/sys/fs/cgroup") {
			continue
		}
		switch f[2] {
		case "cgroup":
			v1 = true
		case "cgroup2":
			v2 = true
			v2root = f[1] == "/sys/fs/cgroup"
		}
	}
	switch {
	case v2root:
		return "v2"
	case v1 && v2:
		return "hybrid"
	case v1:
		return "v1"
	}
	return "none"
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name   string
		group  string
		limits Limits
		want   string
	}{
		{"empty name", "", Limits{}, "invalid group name"},
		{"absolute name", "/mcpbox/x", Limits{}, "invalid group name"},
		{"escaping name", "../x", Limits{}, "invalid group name"},
		{"unclean name", "mcpbox//x", Limits{}, "invalid group name"},
		{"trailing slash", "mcpbox/x/", Limits{}, "invalid group name"},
		{"negative memory", "mcpbox-test/x", Limits{MemoryBytes: -1}, "invalid MemoryBytes"},
		{"negative pids", "mcpbox-test/x", Limits{Pids: -1}, "invalid Pids"},
		{"negative cpus", "mcpbox-test/x", Limits{CPUs: -1}, "invalid CPUs"},
		{"tiny cpus", "mcpbox-test/x", Limits{CPUs: 0.001}, "below the kernel's minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New(tt.group, tt.limits)
			if err == nil {
				g.Delete()
				t.Fatalf("New(%q, %+v) succeeded", tt.group, tt.limits)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestNewExisting(t *testing.T) {
	g := newGroup(t, Limits{})
	_, err := New(g.Name(), Limits{})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("New of an existing group: %v, want fs.ErrExist", err)
	}
	// The error names the step and the path.
	if !strings.HasPrefix(err.Error(), "cgroup: mkdir /sys/fs/cgroup/") || !strings.Contains(err.Error(), g.Name()) {
		t.Errorf("error %q does not name the mkdir and the path", err)
	}
	// The failed New removed nothing of the existing group.
	if _, err := Load(g.Name()); err != nil {
		t.Errorf("existing group damaged: %v", err)
	}
}

func TestLimitFiles(t *testing.T) {
	g := newGroup(t, Limits{CPUs: 0.5, MemoryBytes: 64 << 20, Pids: 32})
	type file struct{ name, want string }
	v1 := map[string][]file{
		"memory": {{"memory.limit_in_bytes", "67108864"}, {"memory.memsw.limit_in_bytes", "67108864"}},
		"pids":   {{"pids.max", "32"}},
		"cpu":    {{"cpu.cfs_quota_us", "50000"}, {"cpu.cfs_period_us", "100000"}},
	}
	v2 := map[string][]file{
		"memory": {{"memory.max", "67108864"}, {"memory.swap.max", "0"}},
		"pids":   {{"pids.max", "32"}},
		"cpu":    {{"cpu.max", "50000 100000"}},
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		t.Run(c, func(t *testing.T) {
			d, ok := g.carrier(c)
			if !ok {
				t.Skipf("skipped: no hierarchy on this host carries %s", c)
			}
			files := v1[c]
			if d.v2 {
				files = v2[c]
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(d.path, f.name))
				if errors.Is(err, fs.ErrNotExist) && strings.Contains(f.name, "sw") {
					t.Logf("%s: no swap accounting on this host", f.name)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSpace(string(b)); got != f.want {
					t.Errorf("%s = %q, want %q", f.name, got, f.want)
				}
			}
		})
	}
}

// carrier returns the group's directory in the hierarchy carrying c.
func (g *Group) carrier(c string) (dir, bool) {
	for _, d := range g.dirs {
		if d.has(c) {
			return d, true
		}
	}
	return dir{}, false
}

func TestAdd(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20, Pids: 32})
	cmd, _ := start(t, g, "sleep", "30")
	pid := cmd.Process.Pid

	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, pid) {
		t.Errorf("Pids() = %v, want it to contain %d", pids, pid)
	}
	// The kernel agrees: the process is in the group in every hierarchy.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs {
		t.Run(filepath.Base(d.root), func(t *testing.T) {
			want := ":/" + g.Name() + "\n"
			found := false
			for line := range strings.Lines(string(b)) {
				_, rest, _ := strings.Cut(line, ":")
				ctrls, _, _ := strings.Cut(rest, ":")
				inHierarchy := (d.v2 && ctrls == "") || (!d.v2 && slices.Contains(strings.Split(ctrls, ","), d.controllers[0]))
				if inHierarchy && strings.HasSuffix(line, want) {
					found = true
				}
			}
			if !found {
				t.Errorf("/proc/%d/cgroup does not put it in %s:\n%s", pid, d.path, b)
			}
		})
	}

	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// MemoryBytes may be 0: on v1 a process's pages stay charged to the
	// cgroup it came from.
	if st.Pids < 1 || st.MemoryBytes < 0 {
		t.Errorf("Stats() = %+v, want at least one task and a memory figure", st)
	}
}

func TestAddErrors(t *testing.T) {
	g := newGroup(t, Limits{})
	tests := []struct {
		name string
		pid  int
		want string
	}{
		{"zero", 0, "invalid pid"},
		{"negative", -5, "invalid pid"},
		{"no such process", 1 << 30, "cgroup: write /sys/fs/cgroup/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := g.Add(tt.pid)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Add(%d) = %v, want an error containing %q", tt.pid, err, tt.want)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	testutil.RequireRoot(t)
	name := testPrefix + "/" + testutil.ID()
	g, err := New(name, Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.dirs) == 0 {
		t.Fatal("New made no directory")
	}
	for i := range 2 { // the second time finds nothing to do
		if err := g.Delete(); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	for _, d := range g.dirs {
		if _, err := os.Stat(d.path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Delete: %v", d.path, err)
		}
	}
	if _, err := Load(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load after Delete: %v, want fs.ErrNotExist", err)
	}
	// Cleanup code may meet a group already gone.
	if pids, err := g.Pids(); err != nil || len(pids) != 0 {
		t.Errorf("Pids after Delete = %v, %v; want none", pids, err)
	}
	if err := g.Kill(); err != nil {
		t.Errorf("Kill after Delete: %v", err)
	}
}

func TestDeleteBusy(t *testing.T) {
	g := newGroup(t, Limits{})
	start(t, g, "sleep", "30")
	err := g.Delete()
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "cgroup: rmdir /sys/fs/cgroup/") {
		t.Errorf("Delete of a group with a process: %v, want EBUSY naming the rmdir and path", err)
	}
	if _, err := Load(g.Name()); err != nil {
		t.Errorf("a failed Delete removed the group: %v", err)
	}
}

func TestLoad(t *testing.T) {
	g := newGroup(t, Limits{Pids: 8})
	loaded, err := Load(g.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(paths(loaded), paths(g)) {
		t.Errorf("Load found %v, New made %v", paths(loaded), paths(g))
	}
	cmd, _ := start(t, loaded, "sleep", "30")
	if pids, _ := g.Pids(); !slices.Contains(pids, cmd.Process.Pid) {
		t.Errorf("a process added through the loaded group is not in the group: %v", pids)
	}
}

func paths(g *Group) []string {
	var p []string
	for _, d := range g.dirs {
		p = append(p, d.path)
	}
	return p
}

func TestList(t *testing.T) {
	testutil.RequireRoot(t)
	name := testPrefix + "/" + testutil.ID()
	g, err := New(name, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Delete() })

	tests := []struct {
		name   string
		before func()
		want   bool
	}{
		{"after New", func() {}, true},
		{"after Delete", func() { g.Delete() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.before()
			names, err := List(testPrefix)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(names, name) != tt.want {
				t.Errorf("List(%q) = %v; contains %s: %v, want %v", testPrefix, names, name, !tt.want, tt.want)
			}
		})
	}
}

func TestListMissingPrefix(t *testing.T) {
	names, err := List("mcpbox-test-nothing-here-" + strconv.Itoa(os.Getpid()))
	if err != nil || len(names) != 0 {
		t.Errorf("List of a prefix that does not exist = %v, %v; want none", names, err)
	}
}

// BenchmarkNewDelete measures a group's life on the sandbox start and stop
// paths, with all three limits; p50-ms and p99-ms are New alone.
func BenchmarkNewDelete(b *testing.B) {
	testutil.RequireRoot(b)
	limits := Limits{CPUs: 1, MemoryBytes: 1 << 30, Pids: 512}
	var timings testutil.Timings
	for b.Loop() {
		name := testPrefix + "/" + testutil.ID()
		var g *Group
		var err error
		timings.Time(func() { g, err = New(name, limits) })
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Delete(); err != nil {
			b.Fatal(err)
		}
	}
	timings.Report(b)
}

// TestLimitWriteUnderSignals writes a group's memory limit while its
// thread is flooded with signals, as Go's preemption does under load. A
// v1 memory limit write fails with EINTR when a signal is pending as it
// starts; the write must be retried, not reported.
func TestLimitWriteUnderSignals(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20})
	d, ok := g.carrier("memory")
	if !ok {
		t.Skip("skipped: no hierarchy on this host carries memory")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := unix.Getpid(), unix.Gettid()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				// SIGURG is the runtime's own preemption signal: it is
				// handled and ignored, wherever it lands.
				unix.Tgkill(pid, tid, unix.SIGURG)
			}
		}
	}()
	limit := "memory.limit_in_bytes"
	if d.v2 {
		limit = "memory.max"
	}
	for i := range 3000 {
		if err := writeInt(filepath.Join(d.path, limit), 64<<20); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
}
