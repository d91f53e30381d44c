package memstore_test

import (
	"testing"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/ledger/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ledger.Store {
		s := memstore.New(ledger.DefaultPolicy())
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
