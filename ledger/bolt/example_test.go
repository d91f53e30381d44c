package bolt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "reconciler-example-")
	defer os.RemoveAll(dir)
	s, err := bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_1", Tool: "stripe.payment_intents.create", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, ReplayWindow: 24 * time.Hour,
		Intent: json.RawMessage(`{"amount":1050,"currency":"usd"}`),
	}
	ctx := context.Background()
	c, _ := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
	first, _ := s.Claim(ctx, c)
	// The runtime's call timed out: the row becomes unknown, never a new key.
	row, _, _ := s.Report(ctx, "acme", first.Row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: now.Add(time.Second)})
	// The agent retries the same intent: same key, and Stripe may replay it.
	c, _ = ledger.NewClaim(req, ledger.DefaultPolicy(), now.Add(time.Minute))
	again, _ := s.Claim(ctx, c)
	fmt.Println(first.Decision, row.Status, again.Decision)
	// Output: proceed unknown retry_same_key
}
