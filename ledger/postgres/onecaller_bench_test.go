package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// BenchmarkClaimOneCaller is one caller's new-key claims on the store
// against the same rows inserted bare (one INSERT … ON CONFLICT DO NOTHING
// into a table with the pgx claim service's columns and two unique keys,
// as cmd/httpload's baseline does without HTTP): the store's own latency
// per claim, client and server. With synchronous_commit=off in
// RECONCILER_TEST_POSTGRES_URL it leaves the WAL flush out (BENCHMARKS.md,
// issue 31).
func BenchmarkClaimOneCaller(b *testing.B) {
	ctx := context.Background()
	s := openStore(b, newSchema(b, sharedDB(b)), Options{Policy: ledger.DefaultPolicy()})
	var run int // each b.Run claims keys of its own
	mk := func(i int) ledger.Claim {
		i += run * 1000000
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run_bench", Tool: "stripe.payment_intents.create", ToolCallID: "call_" + strconv.Itoa(i),
			Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, ReplayWindow: 24 * time.Hour,
			Intent: json.RawMessage(`{"amount":` + strconv.Itoa(1000+i) + `}`),
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	if _, err := s.pool.Exec(ctx, `CREATE TABLE bare_claims (tenant text NOT NULL, key text NOT NULL, local_id text NOT NULL UNIQUE,
		  status text NOT NULL, next_check_at timestamptz, first_seen_at timestamptz NOT NULL, row jsonb NOT NULL,
		  PRIMARY KEY (tenant, key))`); err != nil {
		b.Fatal(err)
	}
	b.Run("store", func(b *testing.B) {
		run++
		for i := range b.N {
			c := mk(i)
			if _, err := s.Claim(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		run++
		for i := range b.N {
			c := mk(i)
			v, _ := json.Marshal(c.Row)
			r := c.Row
			if _, err := s.pool.Exec(ctx, `INSERT INTO bare_claims (tenant, key, local_id, status, next_check_at, first_seen_at, row) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
				r.Tenant, r.Key, r.MetadataLocalID, string(r.Status), r.NextCheckAt, r.FirstSeenAt, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
