package mcpbox

import (
	"context"
	"time"
)

// HostTemplate is the name of the template every sandbox gets when none
// is named: read-only binds of the host's /usr.
const HostTemplate = "default"

// TemplateAliases maps other names of templates to their own: E2B's
// template ids, so an E2B client's choice means what it says.
var TemplateAliases = map[string]string{
	"base":                HostTemplate,
	"code-interpreter-v1": "code-interpreter",
}

// Template describes a root filesystem sandboxes start from: content-
// addressed layers, mounted as overlay lower layers (bottom first), and
// what a sandbox from it needs to know.
type Template struct {
	// Name is the template's own name (never an alias).
	Name string `json:"name"`
	// Layers are the digests ("sha256:…") of its layers' uncompressed
	// contents, bottom first. Empty for the host template.
	Layers []string `json:"layers,omitempty"`
	// HostSystem says its system is the host's: its layers go on top of
	// the host template's root (the host's /usr and a few /etc files,
	// bound read-only) instead of being a whole root. A commit of a
	// session of the host template, or of such a template, makes one; it
	// holds only what the sessions wrote, so it cannot be exported.
	HostSystem bool `json:"host_system,omitempty"`
	// User is the image's default user ("1000", "user", "0:0"); code runs
	// as the sandbox's user whatever it says, it is kept for export.
	User string `json:"user,omitempty"`
	// Workdir is the working directory of user code; "" is /workspace.
	Workdir string `json:"workdir,omitempty"`
	// Env is added to every process's environment (PATH among them).
	Env map[string]string `json:"env,omitempty"`
	// Languages are the languages whose interpreter the template has.
	Languages []Language `json:"languages,omitempty"`
	// Shell runs shell lines (commands): /bin/bash when the template has
	// it, else /bin/sh.
	Shell string `json:"shell,omitempty"`
	// Source says where it came from: "oci:PATH", "registry:REF",
	// "commit:SESSION", "debian:SUITE", "recipe:NAME", "host".
	Source string `json:"source,omitempty"`
	// Parent is the template a commit was made on top of.
	Parent string `json:"parent,omitempty"`
	// Size is the bytes its layers take on disk (shared layers counted in
	// each template that has them).
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// Has reports whether the template offers lang.
func (t *Template) Has(lang Language) bool {
	for _, l := range t.Languages {
		if l == lang {
			return true
		}
	}
	return false
}

// TemplateCatalog is what the manager needs of the templates on this
// machine: to turn a name a caller gave into a template, or refuse it.
type TemplateCatalog interface {
	// Template resolves name (after aliases) to a template; an unknown
	// name is ENOTFOUND with the names that exist in its message. A
	// built-in recipe not built yet may be built here, reporting
	// progress through progress (which may be nil).
	Template(ctx context.Context, name string, progress func(msg string)) (*Template, error)
	// Templates lists every template there is, the host's first.
	Templates(ctx context.Context) ([]*Template, error)
}
