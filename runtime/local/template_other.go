//go:build !linux

package local

import (
	"context"

	"github.com/mcpbox/mcpbox/template"
)

// Templates is unsupported on this platform.
func (*Runtime) Templates() (*template.Store, error) { return nil, unsupported() }

// UpperDir is unsupported on this platform.
func (*Runtime) UpperDir(context.Context, string) (string, error) { return "", unsupported() }

// SandboxTemplate is unsupported on this platform.
func (*Runtime) SandboxTemplate(string) (string, error) { return "", unsupported() }

// TemplateUsers is unsupported on this platform.
func (*Runtime) TemplateUsers(context.Context, string) ([]string, error) { return nil, unsupported() }
