package local_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// TestRootless runs rootlessInner as an unprivileged user (nobody): the
// runtime must then work through a user namespace with one uid mapped and
// say it is rootless.
func TestRootless(t *testing.T) {
	testutil.RequireRoot(t)
	// The test binary sits in a directory only root may enter: copy it out.
	dir, err := os.MkdirTemp("", "mcpbox-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "local.test")
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(dst, src)
	src.Close()
	dst.Close()
	home := filepath.Join(dir, "home")
	os.Mkdir(home, 0o755)
	os.Chown(home, 65534, 65534)

	cmd := exec.Command(bin)
	cmd.Env = []string{"MCPBOX_ROOTLESS_INNER=1", "MCPBOX_HOME=" + home, "PATH=" + local.DefaultPath, "HOME=" + home}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("rootless: ok")) {
		t.Fatalf("rootless run failed: %v\n%s", err, out)
	}
}

// rootlessInner is the unprivileged half of TestRootless, run by TestMain
// when MCPBOX_ROOTLESS_INNER is set. It prints "rootless: ok" on success.
func rootlessInner() error {
	rt, err := local.New(nil)
	if err != nil {
		return err
	}
	if !rt.Rootless() {
		return errors.New("runtime does not say it is rootless")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fl, _ := mcpbox.LookupFlavor("small")
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: fl})
	if err != nil {
		return err
	}
	defer rt.Destroy(context.Background(), sb.ID)
	c := agentclient.ForSandbox(rt, sb.ID)
	defer c.Close()
	var out bytes.Buffer
	res, err := c.Run(ctx, agentclient.Command{Cmd: "sh", Args: []string{"-c",
		"id -u; grep CapEff /proc/self/status; python3 -c 'print(6*7)'; touch /usr/x 2>&1; ls /proc | grep -c '^[0-9]'"}}, &out, &out)
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("%v %v: %s", res, err, out.String())
	}
	for _, want := range []string{"0\n", "CapEff:\t0000000000000000", "42\n", "Read-only file system"} {
		if !strings.Contains(out.String(), want) {
			return fmt.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The Python kernel, started from the driver the runtime precompiled.
	var got strings.Builder
	err = c.Execute(ctx, agentclient.ExecuteRequest{Code: "import sys\nx = sys.modules['mcpbox_kernel'].__file__\nx"}, func(ev mcpbox.CodeEvent) {
		got.WriteString(ev.Type + ":" + ev.Text + fmt.Sprint(string(ev.Value), errValue(ev)) + " ")
	})
	if err != nil || !strings.Contains(got.String(), "result:'/opt/mcpbox/mcpbox_kernel.py'") {
		return fmt.Errorf("python kernel: %v: %s", err, got.String())
	}
	if err := rt.Destroy(context.Background(), sb.ID); err != nil {
		return err
	}
	fmt.Println("rootless: ok")
	return nil
}

// TestAgentSIGTERM checks PID 1's shutdown: on SIGTERM the agent stops its
// processes and exits, and Destroy still cleans up after it.
func TestAgentSIGTERM(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: testutil.ID(), Flavor: tiny})
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.ForSandbox(rt, sb.ID)
	defer c.Close()
	marker := "term" + testutil.ID()
	go c.Run(ctx, agentclient.Command{Cmd: "bash", Args: []string{"-c", "exec -a " + marker + " sleep 300"}}, nil, nil)
	if !hostProcessWith(marker) {
		t.Fatal("sleeper did not start")
	}
	if err := syscall.Kill(rt.PID(sb.ID), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, _ := rt.List(ctx)
		if len(list) == 1 && !list[0].Alive {
			break // the agent exited
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent still alive 10s after SIGTERM: %v", list)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hostProcessWith(marker) {
		t.Errorf("agent exited but left %s running", marker)
	}
	if err := rt.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rt, sb)
}
