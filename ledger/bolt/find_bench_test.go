package bolt

import (
	"context"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

// BenchmarkFindRows is the console's complete search on a 100,000-row
// tenant: a receipt id and a tool call id by a scan of the tenant's rows in
// one read transaction (each row decoded only when its bytes hold the
// value), and a local id through its index.
//
//	go test -run '^$' -bench BenchmarkFindRows -benchtime 20x ./ledger/bolt/
func BenchmarkFindRows(b *testing.B) {
	const settled = 100_000
	s, err := Open(dueFixture(b, settled), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tenant := benchClaim(b, 0).Row.Tenant
	for _, bc := range []struct {
		name string
		q    ledger.FindQuery
	}{
		{"receipt_id", ledger.FindQuery{Tenant: tenant, ReceiptID: "pi_54321"}},
		{"tool_call_id", ledger.FindQuery{Tenant: tenant, ToolCallID: "call_54321"}},
		{"local_id", ledger.FindQuery{Tenant: tenant, LocalID: ledger.LocalID(tenant, "0000000000000000000000000000d43100000000000000000000000000000000", true)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				f, err := s.FindRows(context.Background(), bc.q)
				if err != nil || len(f.Rows) != 1 || f.Cut {
					b.Fatalf("FindRows: %d rows, cut %v, %v", len(f.Rows), f.Cut, err)
				}
			}
		})
	}
}
