package e2b

import (
	"net/http"

	"github.com/mcpbox/mcpbox"
)

// setNetwork replaces a running sandbox's egress policy (PUT
// /sandboxes/{id}/network).
func (h *Handler) setNetwork(_ *http.Request, s *mcpbox.Session, p *mcpbox.NetworkPolicy) error {
	return mcpbox.Errorf(mcpbox.EUNSUPPORTED, "changing the network of sandbox %q is not available yet: sandboxes have no network", s.ID).
		WithSuggestion("leave the network as it is")
}
