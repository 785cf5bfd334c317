package fds

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// leak returns a descriptor of a fresh pipe without close-on-exec, as a
// careless parent would leave one, numbered at least 100.
func leak(t *testing.T) int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	fd, err := unix.FcntlInt(uintptr(p[0]), unix.F_DUPFD, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func cloexec(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatalf("fd %d: %v", fd, err)
	}
	return flags&unix.FD_CLOEXEC != 0
}

func TestCloseOnExec(t *testing.T) {
	fd := leak(t)
	if err := CloseOnExec(3); err != nil {
		t.Fatal(err)
	}
	if !cloexec(t, fd) {
		t.Errorf("fd %d is still passed on by exec", fd)
	}
	// And exec agrees: a child sees only its standard descriptors.
	out, err := exec.Command("/bin/sh", "-c", "ls /proc/self/fd").Output()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(strings.Fields(string(out)), strconv.Itoa(fd)) {
		t.Errorf("a child inherited fd %d: %s", fd, out)
	}
}

// TestCloseInherited runs the test binary again with a descriptor it did
// not open (fd 3, handed over as exec.Cmd.ExtraFiles are) and lets it
// open one of its own before calling CloseInherited.
func TestCloseInherited(t *testing.T) {
	if os.Getenv("FDS_TEST_CHILD") != "" {
		closeInheritedChild()
		return
	}
	f, err := os.CreateTemp(t.TempDir(), "inherited")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCloseInherited$")
	cmd.Env = append(os.Environ(), "FDS_TEST_CHILD=1")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	// The child may have inherited more from whoever ran the tests; fd 3
	// is the one it certainly did.
	if !strings.Contains(string(out), "own open fd3 bad file descriptor") || !strings.Contains(string(out), "<3>") {
		t.Errorf("child says:\n%s", out)
	}
}

func closeInheritedChild() {
	own, err := os.Open("/dev/null") // close-on-exec, as Go opens everything
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	closed, err := CloseInherited(3)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	state := "closed"
	if _, err := unix.FcntlInt(own.Fd(), unix.F_GETFD, 0); err == nil {
		state = "open"
	}
	_, err3 := unix.FcntlInt(3, unix.F_GETFD, 0)
	list := ""
	for _, fd := range closed {
		list += fmt.Sprintf("<%d>", fd)
	}
	fmt.Printf("closed %s own %s fd3 %v\n", list, state, err3)
}
