package local_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// importImage writes img as an OCI layout and imports it into rt's
// template store as name.
func importImage(t testing.TB, rt *local.Runtime, name string, img v1.Image) *mcpbox.Template {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	s, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := s.Import(context.Background(), name, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func newTemplateSandbox(t testing.TB, rt *local.Runtime, tmpl string) (*mcpbox.Sandbox, *agentclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: mcpbox.Flavors["small"], Template: tmpl,
		Prestart: []mcpbox.Language{mcpbox.Python}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Destroy(context.Background(), sb.ID) })
	c := agentclient.ForSandbox(rt, sb.ID)
	t.Cleanup(func() { c.Close() })
	return sb, c
}

// TestTemplateSandboxSeesTheImage runs code in a sandbox made from an
// imported image: the image's Python and modules, its users and owners,
// its whiteouts applied, and nothing of the host's /usr.
func TestTemplateSandboxSeesTheImage(t *testing.T) {
	rt := newRuntime(t)
	tm := importImage(t, rt, "pyimg", testutil.PythonImage(t))
	if !tm.Has(mcpbox.Python) || tm.Has(mcpbox.JavaScript) {
		t.Fatalf("languages %v", tm.Languages)
	}
	sb, c := newTemplateSandbox(t, rt, "pyimg")
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"python and a module only the image has", []string{"python3", "-c", "import imageonly, sys; print(imageonly.VALUE, sys.executable)"}, "42 /usr/bin/python3\n"},
		{"owner mapped", []string{"stat", "-c", "%u:%g %a", "/home/app/owned"}, "1234:1234 600\n"},
		{"user code's user", []string{"sh", "-c", "id -u; id -un; echo $HOME $IMAGE_VAR; pwd"}, "1000\nuser\n/home/user from-image\n/workspace\n"},
		{"whiteout", []string{"sh", "-c", "ls /etc/removed 2>/dev/null || echo absent"}, "absent\n"},
		{"opaque directory and hard link", []string{"sh", "-c", "ls /opt/data; stat -c %h /opt/data/new"}, "link\nnew\n2\n"},
		{"absolute symlink stays in the sandbox", []string{"sh", "-c", "readlink /hostpasswd; cat /hostpasswd 2>/dev/null || echo unreadable"}, "/../../../../etc/shadow\nunreadable\n"},
		{"no host /usr", []string{"sh", "-c", "ls /usr/bin/node /usr/bin/gcc 2>/dev/null; echo done"}, "done\n"},
		{"writes go to the sandbox's disk", []string{"sh", "-c", "echo hi > /workspace/f && cat /workspace/f && echo x > /tmp/new && cat /tmp/new"}, "hi\nx\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, res := run(t, c, 20*time.Second, tc.argv...)
			if out != tc.want || res.ExitCode != 0 {
				t.Errorf("%q: %q (stderr %q) exit %d, want %q", tc.argv, out, errOut, res.ExitCode, tc.want)
			}
		})
	}
	// What the sandbox wrote stays in it: the layer is untouched.
	s, _ := rt.Templates()
	if _, err := os.Stat(filepath.Join(s.LayerDir(tm.Layers[0]), "tmp/new")); err == nil {
		t.Error("a sandbox's write reached the shared layer")
	}
	users, err := rt.TemplateUsers(context.Background(), "pyimg")
	if err != nil || len(users) != 1 || !strings.Contains(users[0], sb.ID) {
		t.Errorf("users of the template: %v %v", users, err)
	}
}

// TestTemplateBrokenLayer: a template whose layer went missing is refused
// with a clear error, never a sandbox with a hole in its root.
func TestTemplateBrokenLayer(t *testing.T) {
	rt := newRuntime(t)
	tm := importImage(t, rt, "broken", testutil.PythonImage(t))
	s, _ := rt.Templates()
	if err := os.Rename(s.LayerDir(tm.Layers[1]), s.LayerDir(tm.Layers[1])+".moved"); err != nil {
		t.Fatal(err)
	}
	_, err := rt.Create(context.Background(), mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: mcpbox.Flavors["small"], Template: "broken"})
	if err == nil || !strings.Contains(err.Error(), "missing or corrupt") {
		t.Fatalf("create from a template with a missing layer: %v", err)
	}
	if _, err := rt.Create(context.Background(), mcpbox.SandboxSpec{ID: mcpbox.NewID(), Flavor: mcpbox.Flavors["small"], Template: "nosuch"}); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
		t.Errorf("unknown template: %v", err)
	}
}

// TestTemplateCommit commits a session in which the user installed a
// module with `pip install --user`'s layout and wrote and deleted files;
// a new session from the commit finds them as they were left.
func TestTemplateCommit(t *testing.T) {
	rt := newRuntime(t)
	importImage(t, rt, "pybase", testutil.PythonImage(t))
	sb, c := newTemplateSandbox(t, rt, "pybase")
	line := `set -e
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site" && echo 'ANSWER = 6 * 7' > "$site/usermod.py"
echo kept > /workspace/notes.txt
echo '#!/bin/sh' > /tmp/tool && chmod 755 /tmp/tool
echo done`
	if out, errOut, res := run(t, c, 20*time.Second, "sh", "-c", line); out != "done\n" || res.ExitCode != 0 {
		t.Fatalf("set-up: %q %q %d", out, errOut, res.ExitCode)
	}
	s, _ := rt.Templates()
	upper, err := rt.UpperDir(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := rt.SandboxTemplate(sb.ID)
	if err != nil || parent != "pybase" {
		t.Fatalf("sandbox's template: %q %v", parent, err)
	}
	tm, err := s.Commit(context.Background(), "pycommit", parent, upper, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Layers) != 3 || tm.Parent != "pybase" {
		t.Fatalf("%+v", tm)
	}
	_, c2 := newTemplateSandbox(t, rt, "pycommit")
	out, errOut, res := run(t, c2, 20*time.Second, "sh", "-c",
		`python3 -c 'import usermod; print(usermod.ANSWER)'; cat /workspace/notes.txt; stat -c '%u %a' /workspace/notes.txt /tmp/tool; ls /etc/removed 2>/dev/null || echo still-removed`)
	want := "42\nkept\n1000 644\n1000 755\nstill-removed\n"
	if out != want || res.ExitCode != 0 {
		t.Errorf("new session from the commit: %q (stderr %q), want %q", out, errOut, want)
	}
}

// TestTemplateWithoutLibc: the agent needs nothing from the image (it is
// the host's binary, started before the root changes): a sandbox from an
// image with no libc, no shell, nothing but a file serves files and
// says clearly that a program is missing.
func TestTemplateWithoutLibc(t *testing.T) {
	rt := newRuntime(t)
	s, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	img := testutil.SingleFileImage(t, "srv/data.txt", "only this\n")
	if _, err := s.FromImage(context.Background(), "bare", img, "test", nil); err != nil {
		t.Fatal(err)
	}
	_, c := newTemplateSandbox(t, rt, "bare")
	rc, err := c.Download(context.Background(), "/srv/data.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "only this\n" {
		t.Errorf("read %q", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Run(ctx, agentclient.Command{Cmd: "python3", Args: []string{"-c", "1"}}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "python3") {
		t.Errorf("a program the image lacks: %v", err)
	}
}
