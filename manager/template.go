package manager

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/mcpbox/mcpbox"
)

// Templates. A session names its template by the name a caller gave,
// resolved here once: aliases (base, code-interpreter-v1) become the
// template's own name, the host template is recorded as "", and a name
// no template has is refused with the list of those that exist. Warm
// pools are per (template, flavor), under the same resolved names, so a
// create for "code-interpreter-v1" claims a sandbox of a
// "code-interpreter" pool.

// resolveTemplate returns the name a session records for the template a
// caller named ("" for the host's) and its description (nil for the
// host's).
func (m *Manager) resolveTemplate(ctx context.Context, name string) (string, *mcpbox.Template, error) {
	canon := name
	if a, ok := mcpbox.TemplateAliases[name]; ok {
		canon = a
	}
	if canon == "" || canon == mcpbox.HostTemplate {
		return "", nil, nil
	}
	if m.opts.Templates == nil {
		return "", nil, mcpbox.Errorf(mcpbox.EINVALID, "unknown template %q: this server has only the host template, %q", name, mcpbox.HostTemplate).
			WithSuggestion("leave template out, or use \"default\"")
	}
	t, err := m.opts.Templates.Template(ctx, canon, nil)
	var e *mcpbox.Error
	if errors.As(err, &e) && e.Code == mcpbox.ENOTFOUND {
		// To a create, a template that does not exist is a bad argument.
		bad := *e
		bad.Code = mcpbox.EINVALID
		return "", nil, &bad
	}
	if err != nil {
		return "", nil, err
	}
	return t.Name, t, nil
}

// templateLanguages says whether the session's template offers lang: a
// clear refusal beats "python3: not found" from inside.
func (m *Manager) checkLanguage(ctx context.Context, s *mcpbox.Session, lang string) error {
	if s.Template == "" || lang == "" || m.opts.Templates == nil {
		return nil
	}
	t, err := m.opts.Templates.Template(ctx, s.Template, nil)
	if err != nil {
		return nil // the sandbox exists: let it answer for itself
	}
	l := mcpbox.Language(lang)
	if l == mcpbox.Shell || t.Has(l) {
		return nil
	}
	var have []string
	for _, x := range t.Languages {
		have = append(have, string(x))
	}
	return mcpbox.Errorf(mcpbox.EUNSUPPORTED, "template %s has no %s interpreter (it offers: %s)", t.Name, lang, strings.Join(have, ", ")).
		With("template", t.Name).With("language", lang).
		WithSuggestion("create the session from a template that has it, such as code-interpreter")
}

// poolTemplate resolves a pool's template at start-up, and says whether
// its sandboxes have a Python kernel to warm. A pool of a template that
// does not exist (yet) is left out with a log line: the config's
// problem, not a reason for the server not to start.
func (m *Manager) poolTemplate(spec *PoolSpec) (python, ok bool) {
	name, t, err := m.resolveTemplate(context.Background(), spec.Template)
	if err != nil {
		m.log.Error("warm pool left out", "template", spec.Template, "flavor", spec.Flavor, "err", err)
		return false, false
	}
	spec.Template = name
	return t == nil || t.Has(mcpbox.Python), true
}

// shell is the program that runs shell lines in s: bash, unless s's
// template has none.
func (m *Manager) shell(ctx context.Context, s *mcpbox.Session) string {
	if s.Template == "" || m.opts.Templates == nil {
		return "/bin/bash"
	}
	if t, err := m.opts.Templates.Template(ctx, s.Template, nil); err == nil && t.Shell != "" {
		return t.Shell
	}
	return "/bin/sh"
}

// TemplateUsers lists the live sessions and the pools that use template
// name: what keeps it from being removed.
func (m *Manager) TemplateUsers(ctx context.Context, name string) ([]string, error) {
	var out []string
	for _, p := range append(slices.Collect(maps.Values(m.pools)), m.localPools()...) {
		if p.spec.Template == name {
			out = append(out, "the warm pool "+p.name())
		}
	}
	live, err := m.opts.Store.ListSessions(ctx, mcpbox.SessionFilter{States: mcpbox.LiveStates})
	if err != nil {
		return nil, err
	}
	for _, s := range live {
		if s.Template == name {
			out = append(out, "session "+s.ID)
		}
	}
	return out, nil
}
