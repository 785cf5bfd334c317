package hosted_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/hosted"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/manager"
	"github.com/mcpbox/mcpbox/runtime/local"
	"github.com/mcpbox/mcpbox/store/memstore"
	"github.com/mcpbox/mcpbox/template"
)

// TestInSandbox runs the test server in a real sandbox: its env arrives,
// it sees the sandbox's filesystem and not the host's, a crash is
// reported and the server comes back.
func TestInSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	rt, err := local.New(&local.Options{Home: testutil.Home(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hosted.New(&hosted.Options{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		h.Close()
		m.StopAll(context.Background())
	}()
	def := pyDef(t, "py", map[string]string{"TOKEN": "tok-123"})
	def.InstallCommands = []string{"echo ran >> installs"}
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	if got := call(t, h, "alice", "py", "env", map[string]any{"name": "TOKEN"}); got != "tok-123" {
		t.Errorf("TOKEN = %q", got)
	}
	if got := call(t, h, "alice", "py", "installs", nil); got != "1" {
		t.Errorf("installs = %s", got)
	}
	list, err := m.List(ctx, "alice", mcpbox.SessionFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("alice's sessions: %v %v", list, err)
	}
	testutil.Track(list[0].ID)
	// The secret is on no command line in the sandbox.
	res, err := m.RunCommand(ctx, "alice", list[0].ID, manager.CommandRequest{Command: "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), "tok-123") {
		t.Errorf("the server's env is on a command line: %s", res.Stdout)
	}
	_, err = h.Call(ctx, "alice", "py", "crash", nil, nil)
	if mcpbox.ErrorCode(err) != mcpbox.EUNAVAILABLE || !strings.Contains(err.Error(), "dying on purpose") {
		t.Fatalf("crash: %v", err)
	}
	if got := call(t, h, "alice", "py", "count", nil); got != "1" {
		t.Errorf("count after restart = %s", got)
	}
}

// localTemplates is the install cache on the local runtime's template
// store, as mcpbox wires it.
type localTemplates struct{ rt *local.Runtime }

func (l localTemplates) Exists(_ context.Context, name string) bool {
	s, err := l.rt.Templates()
	if err != nil {
		return false
	}
	_, err = s.Get(name)
	return err == nil
}

func (l localTemplates) Commit(ctx context.Context, id, name string, progress func(string)) error {
	s, err := l.rt.Templates()
	if err != nil {
		return err
	}
	parent, err := l.rt.SandboxTemplate(id)
	if err != nil {
		return err
	}
	upper, err := l.rt.UpperDir(ctx, id)
	if err != nil {
		return err
	}
	_, err = s.Commit(ctx, name, parent, upper, template.Progress(progress))
	return err
}

// TestInstallCacheInSandbox: a server on a stored template, or on the
// host template, installs once; its next start, in a new sandbox, comes
// from the committed template, with what the install wrote and without
// running it again.
func TestInstallCacheInSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("stored template", func(t *testing.T) { testInstallCache(t, "pyimg") })
	t.Run("host template", func(t *testing.T) { testInstallCache(t, "") })
}

func testInstallCache(t *testing.T, template string) {
	rt, err := local.New(&local.Options{Home: testutil.Home(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := rt.Templates()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FromImage(ctx, "pyimg", testutil.PythonImage(t), "test", nil); err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(ctx, &manager.Options{Runtime: rt, Store: memstore.New(), Templates: store})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hosted.New(&hosted.Options{Manager: m, Templates: localTemplates{rt}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		h.Close()
		m.StopAll(context.Background())
	}()
	def := pyDef(t, "py", map[string]string{"INSTALLS_IN_HOME": "1"})
	def.Template = template
	// The install counts its runs in $HOME, which the commit keeps.
	def.InstallCommands = []string{`echo ran >> "$HOME/installs"`}
	if err := h.Add(def); err != nil {
		t.Fatal(err)
	}
	var progress []string
	res, err := h.Call(ctx, "alice", "py", "installs", nil, &hosted.CallOptions{OnProgress: func(p hosted.Progress) { progress = append(progress, p.Message) }})
	if err != nil || text(t, res) != "1" {
		t.Fatalf("first start: %v %v, progress %q", err, res, progress)
	}
	if !slices.ContainsFunc(progress, func(m string) bool { return strings.Contains(m, "cached as template hosted-py-") }) {
		t.Errorf("no word of the cache in the progress: %q", progress)
	}
	if err := h.Stop("alice", "py"); err != nil {
		t.Fatal(err)
	}
	progress = nil
	res, err = h.Call(ctx, "alice", "py", "installs", nil, &hosted.CallOptions{OnProgress: func(p hosted.Progress) { progress = append(progress, p.Message) }})
	if err != nil || text(t, res) != "1" {
		t.Fatalf("second start: %v %v, progress %q", err, res, progress)
	}
	if slices.ContainsFunc(progress, func(m string) bool { return strings.HasPrefix(m, "install 1/1") }) {
		t.Errorf("the second start ran the install: %q", progress)
	}
	list, _ := m.List(ctx, "alice", mcpbox.SessionFilter{})
	for _, s := range list {
		testutil.Track(s.ID)
	}
}
