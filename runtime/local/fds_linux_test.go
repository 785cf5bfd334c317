package local_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestContainInheritedFD hands the sandbox what a careless parent (a
// shell, a service manager) hands mcpbox: a directory descriptor without
// close-on-exec. Through /proc/self/fd/N/... it would reach the host's
// file system from inside, whatever the sandbox's root.
func TestContainInheritedFD(t *testing.T) {
	rt := newRuntime(t)
	dir := worldWritableDir(t)
	opened, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(opened)
	// F_DUPFD makes a copy without close-on-exec, numbered above the
	// descriptors the host hands the sandbox (a low number would be
	// replaced by them). This test binary's host side does not run
	// fds.CloseOnExec (main does), so the copy reaches the sandbox's PID 1
	// as one leaked into mcpbox by its parent would.
	fd, err := unix.FcntlInt(uintptr(opened), unix.F_DUPFD, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	_, c := newTinySandbox(t, rt)
	out, _ := mustSh(t, c, fmt.Sprintf(`ls -l /proc/self/fd/ 2>&1
for f in /proc/self/fd/* /proc/1/fd/*; do { echo pwned > "$f/escape"; } 2>/dev/null && echo "wrote through $f"; done
{ echo pwned > /proc/self/fd/%d/escape; } 2>/dev/null; true`, fd))
	if strings.Contains(out, dir) || strings.Contains(out, "wrote through") {
		t.Errorf("user code holds the host directory:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); err == nil {
		t.Errorf("user code wrote %s/escape on the host through an inherited descriptor:\n%s", dir, out)
	}
	// No process of the sandbox, PID 1 included, may hold it either.
	if holders := fdHolders(dir); len(holders) > 0 {
		t.Errorf("processes other than the test hold %s: %s", dir, strings.Join(holders, "; "))
	}
}

// worldWritableDir is a host directory anyone may write to, as a
// sandbox's user would need to abuse a descriptor of it.
func worldWritableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpbox-hostdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fdHolders lists the host processes, other than this one, with a
// descriptor open on path.
func fdHolders(path string) []string {
	var out []string
	links, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/"
	for _, l := range links {
		if strings.HasPrefix(l, self) {
			continue
		}
		if target, err := os.Readlink(l); err == nil && target == path {
			cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(l)), "cmdline"))
			out = append(out, l+" ("+strings.ReplaceAll(string(cmd), "\x00", " ")+")")
		}
	}
	return out
}
