package memstore_test

import (
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/store/memstore"
	"github.com/mcpbox/mcpbox/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) mcpbox.Store { return memstore.New() })
	storetest.RunShared(t, func(*testing.T) (mcpbox.Store, mcpbox.Store) {
		s := memstore.New()
		return s, s
	})
}
