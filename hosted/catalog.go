package hosted

import (
	"context"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox"
)

// maxListPages bounds a paginated list (tools, prompts, resources): a
// server that hands out cursors forever must not hold a start forever.
// Each page is one message, which the transport bounds (maxMessageBytes).
const maxListPages = 100

// Catalog is what a hosted server offers, as it last listed it: its tools,
// and its prompts, resources and resource templates when its initialize
// result declares those capabilities (a server without them is not asked).
type Catalog struct {
	Tools             []*mcp.Tool
	Prompts           []*mcp.Prompt
	Resources         []*mcp.Resource
	ResourceTemplates []*mcp.ResourceTemplate
}

func (c Catalog) clone() Catalog {
	return Catalog{Tools: slices.Clone(c.Tools), Prompts: slices.Clone(c.Prompts), Resources: slices.Clone(c.Resources),
		ResourceTemplates: slices.Clone(c.ResourceTemplates)}
}

// listCatalog lists what cs offers. Only the tools are required: a
// server whose prompts or resources cannot be listed still serves its
// tools, and the failure is logged.
func (in *instance) listCatalog(ctx context.Context, cs *mcp.ClientSession) (Catalog, error) {
	var c Catalog
	var err error
	c.Tools, err = listPages(ctx, "tools/list", func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return res.Tools, res.NextCursor, nil
	})
	if err != nil {
		return Catalog{}, err
	}
	caps := cs.InitializeResult().Capabilities
	if caps == nil {
		return c, nil
	}
	warn := func(what string, err error) {
		in.h.log.Warn("hosted server: "+what+" failed; it is served without them", "server", in.name, "owner", in.owner, "err", err)
	}
	if caps.Prompts != nil {
		c.Prompts, err = listPages(ctx, "prompts/list", func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
			res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.Prompts, res.NextCursor, nil
		})
		if err != nil {
			warn("prompts/list", err)
		}
	}
	if caps.Resources != nil {
		c.Resources, err = listPages(ctx, "resources/list", func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
			res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.Resources, res.NextCursor, nil
		})
		if err != nil {
			warn("resources/list", err)
		}
		c.ResourceTemplates, err = listPages(ctx, "resources/templates/list", func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
			res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.ResourceTemplates, res.NextCursor, nil
		})
		if err != nil {
			warn("resources/templates/list", err)
		}
	}
	return c, nil
}

// listPages follows a list's cursors, up to maxListPages pages.
func listPages[T any](ctx context.Context, method string, page func(ctx context.Context, cursor string) ([]T, string, error)) ([]T, error) {
	var out []T
	cursor := ""
	for range maxListPages {
		items, next, err := page(ctx, cursor)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
	return nil, fmt.Errorf("%s went on for more than %d pages", method, maxListPages)
}

// Catalog starts owner's instance of a server if needed and returns what
// it offers.
func (h *Hosts) Catalog(ctx context.Context, owner, name string, opts *CallOptions) (Catalog, error) {
	s, err := h.Open(ctx, owner, name, opts)
	if err != nil {
		return Catalog{}, err
	}
	defer s.Close()
	s.in.mu.Lock()
	defer s.in.mu.Unlock()
	return s.in.catalog.clone(), nil
}

// CachedCatalog returns what owner's instance of a server listed last,
// without starting it; false when it never ran or its definition changed.
func (h *Hosts) CachedCatalog(owner, name string) (Catalog, bool) {
	def, err := h.Server(name)
	if err != nil {
		return Catalog{}, false
	}
	in := h.instanceFor(def, owner)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.toolsKey == "" || in.toolsKey != def.runKey() {
		return Catalog{}, false
	}
	return in.catalog.clone(), true
}

// GetPrompt gets a prompt of owner's instance of a server, starting it
// if needed. The result is the server's; an error is the server's own
// JSON-RPC error, or says why it got no answer (as Call's).
func (h *Hosts) GetPrompt(ctx context.Context, owner, name, prompt string, args map[string]string) (*mcp.GetPromptResult, error) {
	s, err := h.Open(ctx, owner, name, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.GetPrompt(ctx, prompt, args)
}

// ReadResource reads a resource of owner's instance of a server, starting
// it if needed. Its contents are one message from the sandbox, so at most
// maxMessageBytes (32 MiB).
func (h *Hosts) ReadResource(ctx context.Context, owner, name, uri string) (*mcp.ReadResourceResult, error) {
	s, err := h.Open(ctx, owner, name, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.ReadResource(ctx, uri)
}

// GetPrompt gets a prompt of the held server.
func (s *Session) GetPrompt(ctx context.Context, prompt string, args map[string]string) (*mcp.GetPromptResult, error) {
	if err := s.live(ctx, nil); err != nil {
		return nil, err
	}
	if c := s.r.cs.InitializeResult().Capabilities; c == nil || c.Prompts == nil {
		return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "hosted server %s has no prompts", s.in.name).With("server", s.in.name)
	}
	res, err := s.r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompt, Arguments: args})
	if err != nil {
		return nil, s.in.requestErr(ctx, s.r, err)
	}
	s.ok = true
	return res, nil
}

// ReadResource reads a resource of the held server.
func (s *Session) ReadResource(ctx context.Context, uri string) (*mcp.ReadResourceResult, error) {
	if err := s.live(ctx, nil); err != nil {
		return nil, err
	}
	if c := s.r.cs.InitializeResult().Capabilities; c == nil || c.Resources == nil {
		return nil, mcpbox.Errorf(mcpbox.ENOTFOUND, "hosted server %s has no resources", s.in.name).With("server", s.in.name)
	}
	res, err := s.r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return nil, s.in.requestErr(ctx, s.r, err)
	}
	s.ok = true
	return res, nil
}
