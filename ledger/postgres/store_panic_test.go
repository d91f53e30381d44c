package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
)

// TestPanicInATransactionRollsBack: a panic inside a write transaction
// rolls it back before it propagates, so the connection, its row lock and
// its advisory lock are released: a later write of the same key goes
// through, and Close returns.
func TestPanicInATransactionRollsBack(t *testing.T) {
	s := openStore(t, newSchema(t, pgtest.Database(t)), Options{Policy: ledger.DefaultPolicy(), MaxConns: 2})
	ctx := t.Context()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "r", Tool: "t", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(`{"a":1}`), ReplayWindow: time.Hour,
	}, ledger.DefaultPolicy(), at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, c); err != nil {
		t.Fatal(err)
	}
	for range 3 { // more panics than the pool has connections
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the panic to propagate", r)
				}
			}()
			_ = s.InTx(ctx, func(tx ledger.Tx) error {
				if _, err := tx.GetRow("acme", c.Row.Key); err != nil { // takes the row's locks
					return err
				}
				panic("boom")
			})
		}()
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, _, err := s.Report(rctx, "acme", c.Row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: at.Add(time.Second)}); err != nil {
		t.Fatalf("Report after the panics: %v (a lock or a connection leaked)", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return: a connection leaked")
	}
}
