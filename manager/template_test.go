package manager_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/manager"
)

// catalog is a fixed set of templates.
type catalog map[string]*mcpbox.Template

func (c catalog) Template(_ context.Context, name string, _ func(string)) (*mcpbox.Template, error) {
	if t, ok := c[name]; ok {
		return t, nil
	}
	return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "unknown template %q; templates on this machine: default, code-interpreter, shonly", name)
}

func (c catalog) Templates(context.Context) ([]*mcpbox.Template, error) { return nil, nil }

var testCatalog = catalog{
	"code-interpreter": {Name: "code-interpreter", Layers: []string{"sha256:1"}, Languages: []mcpbox.Language{mcpbox.JavaScript, mcpbox.Python, mcpbox.Shell}},
	"shonly":           {Name: "shonly", Layers: []string{"sha256:2"}, Languages: []mcpbox.Language{mcpbox.Shell}, Shell: "/bin/sh"},
}

func TestTemplateNames(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, manager.Options{Templates: testCatalog})
	for _, tc := range []struct{ asked, recorded string }{
		{"", ""}, {"default", ""}, {"base", ""},
		{"code-interpreter", "code-interpreter"}, {"code-interpreter-v1", "code-interpreter"},
	} {
		s, err := m.Create(ctx, "alice", manager.CreateRequest{Template: tc.asked})
		if err != nil {
			t.Fatalf("template %q: %v", tc.asked, err)
		}
		if s.Template != tc.recorded {
			t.Errorf("template %q: session records %q, want %q", tc.asked, s.Template, tc.recorded)
		}
	}
	_, err := m.Create(ctx, "alice", manager.CreateRequest{Template: "nosuch"})
	if mcpbox.ErrorCode(err) != mcpbox.EINVALID || !strings.Contains(err.Error(), "code-interpreter, shonly") {
		t.Errorf("unknown template: %v", err)
	}
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Template: "shonly"})
	if err != nil {
		t.Fatal(err)
	}
	err = m.ExecuteCode(ctx, "alice", s.ID, manager.CodeRequest{Code: "1", Language: "python"}, func(mcpbox.CodeEvent) {})
	if mcpbox.ErrorCode(err) != mcpbox.EUNSUPPORTED || !strings.Contains(err.Error(), "template shonly has no python") {
		t.Errorf("python in a template without it: %v", err)
	}
	res, err := m.RunCommand(ctx, "alice", s.ID, manager.CommandRequest{Command: "echo $0"}, nil)
	if err != nil || string(res.Stdout) != "/bin/sh\n" {
		t.Errorf("a template without bash runs commands with its sh: %v %+v", err, res)
	}
	users, err := m.TemplateUsers(ctx, "shonly")
	if err != nil || len(users) != 1 || !strings.Contains(users[0], s.ID) {
		t.Errorf("users of shonly: %v %v", users, err)
	}
}

func TestTemplateWithoutCatalog(t *testing.T) {
	m, _, _ := newManager(t, manager.Options{})
	_, err := m.Create(context.Background(), "alice", manager.CreateRequest{Template: "code-interpreter"})
	if mcpbox.ErrorCode(err) != mcpbox.EINVALID || !strings.Contains(err.Error(), "only the host template") {
		t.Errorf("%v", err)
	}
}

func TestTemplatePools(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, rt, _ := newManager(t, manager.Options{Templates: testCatalog, MaxSessions: 6,
		Pools: []manager.PoolSpec{{Template: "code-interpreter-v1", Flavor: "small", Size: 2}, {Template: "nosuch", Flavor: "small", Size: 2}}})
	defer m.Close(ctx)
	go m.Run(ctx)
	waitFor(t, "the pool to fill", func() bool { return m.PoolStats()["code-interpreter/small"] == 2 })
	if _, ok := m.PoolStats()["nosuch/small"]; ok {
		t.Error("a pool of an unknown template was kept")
	}
	pooled := map[string]bool{}
	sbs, _ := rt.List(ctx)
	for _, sb := range sbs {
		pooled[sb.ID] = true
	}
	s, err := m.Create(ctx, "alice", manager.CreateRequest{Template: "code-interpreter-v1"})
	if err != nil {
		t.Fatal(err)
	}
	if !pooled[s.ID] || s.Template != "code-interpreter" {
		t.Errorf("alias did not claim from the pool: %+v", s)
	}
	if users, _ := m.TemplateUsers(ctx, "code-interpreter"); len(users) < 2 || !strings.Contains(strings.Join(users, " "), "warm pool") {
		t.Errorf("users of a pooled template: %v", users)
	}
}
