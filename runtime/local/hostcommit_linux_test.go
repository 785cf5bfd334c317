package local_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// hostInstall is what a hosted server's install commands leave in a
// host-template session: a module in the user's site-packages (pip
// install --user), a program in ~/.local/bin, a file in /workspace.
const hostInstall = `set -e
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site" ~/.local/bin
echo 'ANSWER = 6 * 7' > "$site/hostmod.py"
printf '#!/bin/sh\necho tool ran\n' > ~/.local/bin/hosttool && chmod 755 ~/.local/bin/hosttool
echo kept > /workspace/notes.txt
echo done`

// hostCommitted checks a sandbox made from a commit of hostInstall's
// session: what it wrote is there, owned by the sandbox's user, on the
// host's own /usr, which it still cannot write.
const hostCommitted = `python3 -c 'import hostmod, sys; print(hostmod.ANSWER, sys.executable, sys.version)'
~/.local/bin/hosttool
cat /workspace/notes.txt
stat -c '%u' /workspace/notes.txt
test -s /etc/ssl/certs/ca-certificates.crt && echo host-etc
touch /usr/bin/escape 2>&1 | grep -o 'Read-only file system' || echo usr-writable
pwd`

// TestTemplateCommitHost commits a session of the host template, makes a
// session from the commit, commits that one on top, and checks each
// sees the host's Python with what the sessions wrote, the host's /usr
// still read-only, and that export refuses a template without a system
// of its own.
func TestTemplateCommitHost(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	hostPy, err := exec.Command("/usr/bin/python3", "-c", "import sys; print(sys.executable, sys.version)").Output()
	if err != nil {
		t.Skipf("the host has no /usr/bin/python3: %v", err)
	}
	s, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	sb, c := newTemplateSandbox(t, rt, "")
	if out, errOut, res := run(t, c, 20*time.Second, "sh", "-c", hostInstall); out != "done\n" || res.ExitCode != 0 {
		t.Fatalf("install: %q %q %d", out, errOut, res.ExitCode)
	}
	parent, err := rt.SandboxTemplate(sb.ID)
	if err != nil || (parent != "" && parent != mcpbox.HostTemplate) {
		t.Fatalf("sandbox's template: %q %v", parent, err)
	}
	upper, err := rt.UpperDir(ctx, sb.ID)
	if err != nil {
		t.Fatalf("a host-template sandbox's changes: %v", err)
	}
	tm, err := s.Commit(ctx, "hostcommit", parent, upper, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tm.HostSystem || tm.Parent != mcpbox.HostTemplate || len(tm.Layers) != 1 || !tm.Has(mcpbox.Python) {
		t.Fatalf("%+v", tm)
	}
	for _, rel := range []string{"usr", "bin/python3", "usr/bin/python3"} {
		if _, err := os.Lstat(filepath.Join(s.LayerDir(tm.Layers[0]), rel)); err == nil {
			t.Errorf("the layer holds /%s: only what the session wrote belongs in it", rel)
		}
	}

	want := string(hostPy)
	want = "42 " + want + "tool ran\nkept\n1000\nhost-etc\nRead-only file system\n/workspace\n"
	sb2, c2 := newTemplateSandbox(t, rt, "hostcommit")
	out, errOut, res := run(t, c2, 20*time.Second, "sh", "-c", hostCommitted)
	if out != want || res.ExitCode != 0 {
		t.Fatalf("session from the commit: %q (stderr %q), want %q", out, errOut, want)
	}
	// The session's writes stay in it; the shared layer is read-only.
	if out, _, _ := run(t, c2, 20*time.Second, "sh", "-c", `echo more > /workspace/more.txt && rm /workspace/notes.txt && echo ok`); out != "ok\n" {
		t.Fatalf("write in the second session: %q", out)
	}
	if _, err := os.Stat(filepath.Join(s.LayerDir(tm.Layers[0]), "workspace/notes.txt")); err != nil {
		t.Errorf("a session's delete reached the shared layer: %v", err)
	}
	if users, err := rt.TemplateUsers(ctx, "hostcommit"); err != nil || len(users) != 1 || !strings.Contains(users[0], sb2.ID) {
		t.Errorf("users of the template: %v %v", users, err)
	}

	// Layer on layer: a session of the host-based template commits too.
	parent2, err := rt.SandboxTemplate(sb2.ID)
	if err != nil || parent2 != "hostcommit" {
		t.Fatalf("second sandbox's template: %q %v", parent2, err)
	}
	upper2, err := rt.UpperDir(ctx, sb2.ID)
	if err != nil {
		t.Fatal(err)
	}
	tm2, err := s.Commit(ctx, "hostcommit2", parent2, upper2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tm2.HostSystem || tm2.Parent != "hostcommit" || len(tm2.Layers) != 2 {
		t.Fatalf("%+v", tm2)
	}
	_, c3 := newTemplateSandbox(t, rt, "hostcommit2")
	out, errOut, res = run(t, c3, 20*time.Second, "sh", "-c",
		`python3 -c 'import hostmod; print(hostmod.ANSWER)'; cat /workspace/more.txt; ls /workspace/notes.txt 2>/dev/null || echo still-removed; touch /usr/x 2>&1 | grep -o 'Read-only file system'`)
	if want := "42\nmore\nstill-removed\nRead-only file system\n"; out != want || res.ExitCode != 0 {
		t.Errorf("session from the commit on top: %q (stderr %q), want %q", out, errOut, want)
	}

	for _, name := range []string{"hostcommit", "hostcommit2"} {
		_, err := s.Export(ctx, name, filepath.Join(t.TempDir(), "oci"), nil)
		if mcpbox.ErrorCode(err) != mcpbox.EUNSUPPORTED || !strings.Contains(err.Error(), "host's /usr") {
			t.Errorf("export of %s: %v", name, err)
		}
	}
}

// TestTemplateCommitHostRootless runs hostCommitRootless as an
// unprivileged user (nobody): a host-template session commits, and a
// session from the commit starts, in a rootless runtime too.
func TestTemplateCommitHostRootless(t *testing.T) {
	if os.Getenv("MCPBOX_HOSTCOMMIT_INNER") != "" {
		if err := hostCommitRootless(); err != nil {
			t.Fatal(err)
		}
		return
	}
	testutil.AsNobody(t, "TestTemplateCommitHostRootless", "MCPBOX_HOSTCOMMIT_INNER=1", "PATH="+local.DefaultPath)
}

// hostCommitRootless is the unprivileged half of
// TestTemplateCommitHostRootless.
func hostCommitRootless() error {
	rt, err := local.New(nil)
	if err != nil {
		return err
	}
	if !rt.Rootless() {
		return errors.New("runtime does not say it is rootless")
	}
	s, err := rt.Templates()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fl, _ := mcpbox.LookupFlavor("small")
	sh := func(id, line string) (string, error) {
		c := agentclient.ForSandbox(rt, id)
		defer c.Close()
		var out bytes.Buffer
		res, err := c.Run(ctx, agentclient.Command{Cmd: "sh", Args: []string{"-c", line}}, &out, &out)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		return out.String(), err
	}
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: fl})
	if err != nil {
		return err
	}
	defer rt.Destroy(context.Background(), sb.ID)
	if out, err := sh(sb.ID, hostInstall); err != nil || out != "done\n" {
		return fmt.Errorf("install: %v: %s", err, out)
	}
	upper, err := rt.UpperDir(ctx, sb.ID)
	if err != nil {
		return err
	}
	if _, err := s.Commit(ctx, "hostcommit", "", upper, nil); err != nil {
		return err
	}
	sb2, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: fl, Template: "hostcommit"})
	if err != nil {
		return fmt.Errorf("create from the commit: %w", err)
	}
	defer rt.Destroy(context.Background(), sb2.ID)
	out, err := sh(sb2.ID, `python3 -c 'import hostmod; print(hostmod.ANSWER)'; ~/.local/bin/hosttool; cat /workspace/notes.txt; touch /usr/x 2>&1 | grep -o 'Read-only file system'`)
	if want := "42\ntool ran\nkept\nRead-only file system\n"; err != nil || out != want {
		return fmt.Errorf("session from the commit: %v: %q, want %q", err, out, want)
	}
	return nil
}

// TestTemplateCommitHostMountPoints: a host-based template's layers lie
// beneath the host template's skeleton, so none can turn the place the
// host's /usr or /etc files are bound into a link (the bind would then
// follow it on the host) or hide the merged-/usr links.
func TestTemplateCommitHostMountPoints(t *testing.T) {
	rt := newRuntime(t)
	s, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	upper := t.TempDir()
	decoy := t.TempDir()
	for _, err := range []error{
		os.MkdirAll(filepath.Join(upper, "etc"), 0o755),
		os.Symlink(decoy, filepath.Join(upper, "etc/ssl")),
		os.Symlink(decoy, filepath.Join(upper, "usr")),
		os.MkdirAll(filepath.Join(upper, "lib64"), 0o755),
		os.MkdirAll(filepath.Join(upper, "workspace"), 0o755),
		os.WriteFile(filepath.Join(upper, "workspace/kept"), []byte("kept\n"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Commit(context.Background(), "hostcrafted", mcpbox.HostTemplate, upper, nil); err != nil {
		t.Fatal(err)
	}
	_, c := newTemplateSandbox(t, rt, "hostcrafted")
	out, errOut, res := run(t, c, 20*time.Second, "sh", "-c",
		`cat /workspace/kept; test -d /etc/ssl -a ! -L /etc/ssl && test -s /etc/ssl/certs/ca-certificates.crt && echo etc-bound
test -d /usr -a ! -L /usr && python3 -c 'print("usr-bound")'
test -L /lib64 -o ! -e /lib64 && echo lib64-skeleton`)
	want := "kept\netc-bound\nusr-bound\nlib64-skeleton\n"
	if out != want || res.ExitCode != 0 {
		t.Errorf("sandbox of a crafted host-based template: %q (stderr %q), want %q", out, errOut, want)
	}
	if ents, _ := os.ReadDir(decoy); len(ents) != 0 {
		t.Errorf("something was bound or written through the layer's links: %d entries in %s", len(ents), decoy)
	}
}
