package ucount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSet runs the test binary again as root of a new user namespace,
// where it lowers max_inotify_instances and then finds out how many it
// gets; the host's own maximum must not change.
func TestSet(t *testing.T) {
	if os.Getenv("UCOUNT_TEST_CHILD") != "" {
		setChild()
		return
	}
	before, err := Get("max_inotify_instances")
	if err != nil {
		t.Skipf("skipped: no per-namespace inotify limits here: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSet$")
	cmd.Env = append(os.Environ(), "UCOUNT_TEST_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(err.Error(), "operation not permitted") {
			t.Skipf("skipped: cannot create a user namespace here: %v", err)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "max 3 got 3 then too many open files") {
		t.Errorf("child says:\n%s", out)
	}
	if after, _ := Get("max_inotify_instances"); after != before {
		t.Errorf("the host's max_inotify_instances changed from %d to %d", before, after)
	}
}

func setChild() {
	if err := Set(map[string]int64{"max_inotify_instances": 3, "max_no_such_limit": 1}); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	max, _ := Get("max_inotify_instances")
	got := 0
	var err error
	for got < 10 {
		var fd int
		if fd, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			break
		}
		defer unix.Close(fd)
		got++
	}
	if !errors.Is(err, unix.EMFILE) {
		fmt.Println("unexpected:", err)
	}
	fmt.Printf("max %d got %d then %v\n", max, got, err)
}

func TestSetRefusesPaths(t *testing.T) {
	if err := Set(map[string]int64{"../../fs/inotify/max_user_instances": 1}); err == nil {
		t.Error("a name with a slash was written")
	}
}
