package e2b

import (
	"net/http"

	"github.com/mcpbox/mcpbox"
)

// setNetwork replaces a running sandbox's egress policy (PUT
// /sandboxes/{id}/network) through the manager, which refuses what its
// egress proxy cannot enforce.
func (h *Handler) setNetwork(r *http.Request, s *mcpbox.Session, p *mcpbox.NetworkPolicy) error {
	_, err := h.mgr.SetNetwork(r.Context(), ownerOf(r), s.ID, p)
	return err
}
