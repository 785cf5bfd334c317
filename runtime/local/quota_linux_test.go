package local_test

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// The kernel charges inotify instances and POSIX message-queue bytes to
// every user namespace up the chain, ending with the host user that
// created the sandbox's namespace (root). These tests let one sandbox
// take all it can and check that another sandbox, and the host, still get
// some.

const inotifyHog = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fds, err = [], ""
for _ in range(10000):
    fd = libc.inotify_init1(0o2000000)
    if fd < 0:
        err = os.strerror(ctypes.get_errno())
        break
    fds.append(fd)
print(len(fds), err, flush=True)
`

const mqueueHog = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
n, err = 0, ""
while n < 10000:
    q = libc.mq_open(b"/hog%d" % n, os.O_CREAT | os.O_RDWR, 0o600, None)
    if q < 0:
        err = os.strerror(ctypes.get_errno())
        break
    n += 1
print(n, err, flush=True)
`

// hogCount runs a hog in the sandbox and returns how many it got. The
// inotify hog keeps its descriptors while the sandbox lives (it sleeps
// after printing); message queues outlive their creator anyway.
func hogCount(t *testing.T, out string) int {
	t.Helper()
	f := strings.Fields(out)
	if len(f) == 0 {
		t.Fatalf("hog printed nothing")
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatalf("hog printed %q", out)
	}
	return n
}

func TestContainInotifyQuota(t *testing.T) {
	rt := newRuntime(t)
	_, a := newTinySandbox(t, rt)
	// The hog holds its instances until the sandbox is destroyed.
	out, _ := mustSh(t, a, `setsid python3 -c '`+inotifyHog+`
import time; time.sleep(3600)' > /tmp/hog.out 2>&1 < /dev/null &
while [ ! -s /tmp/hog.out ]; do sleep 0.02; done; cat /tmp/hog.out`)
	n := hogCount(t, out)
	t.Logf("one sandbox got %d inotify instances: %s", n, strings.TrimSpace(out))
	if n == 0 || n > 16 {
		t.Errorf("a sandbox opened %d inotify instances, want 1..16", n)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("the host cannot create an inotify instance after a sandbox took all it could: %v", err)
	} else {
		unix.Close(fd)
	}
	_, b := newTinySandbox(t, rt)
	out, _ = mustSh(t, b, `python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); fd = libc.inotify_init1(0); print(fd, os.strerror(ctypes.get_errno()))'`)
	if strings.HasPrefix(out, "-1") {
		t.Errorf("another sandbox cannot create an inotify instance: %s", out)
	}
}

func TestContainMqueueQuota(t *testing.T) {
	rt := newRuntime(t)
	_, a := newTinySandbox(t, rt)
	out, _ := mustSh(t, a, `python3 -c '`+mqueueHog+`'`)
	n := hogCount(t, out)
	t.Logf("one sandbox got %d message queues: %s", n, strings.TrimSpace(out))
	if n == 0 {
		t.Errorf("a sandbox could not create a single message queue: %s", out)
	}
	if err := hostMqOpen("mcpboxtest" + testutil.ID()); err != nil {
		t.Errorf("the host cannot create a message queue after a sandbox took all it could: %v", err)
	}
	_, b := newTinySandbox(t, rt)
	out, _ = mustSh(t, b, `python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); q = libc.mq_open(b"/one", os.O_CREAT | os.O_RDWR, 0o600, None); print(q, os.strerror(ctypes.get_errno()))'`)
	if strings.HasPrefix(out, "-1") {
		t.Errorf("another sandbox cannot create a message queue: %s", out)
	}
}

// hostMqOpen creates a message queue with the default size on the host,
// as root, and removes it.
func hostMqOpen(name string) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	fd, _, errno := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(p)),
		unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	unix.Close(int(fd))
	unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0)
	return nil
}
