package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// BenchmarkClaimIdempotencyKey is a claim of a new intent on the store,
// from 16 callers, without and with an Idempotency-Key (a new value each):
// the record costs the key's lock and read (one round trip) and an insert
// sent with the COMMIT. BENCHMARKS.md ("Idempotency-Key") compares them.
func BenchmarkClaimIdempotencyKey(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("keyed=%v", keyed), func(b *testing.B) {
			s := openStore(b, newSchema(b, sharedDB(b)), Options{Policy: ledger.DefaultPolicy()})
			var n atomic.Int64
			b.SetParallelism(8) // 16 callers at GOMAXPROCS 2
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					c, err := ledger.NewClaim(ledger.ClaimRequest{
						Tenant: "acme", RunID: "run_bench", Tool: "stripe.payment_intents.create", ToolCallID: "call_" + strconv.FormatInt(i, 10),
						Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, ReplayWindow: 24 * time.Hour,
						Intent: json.RawMessage(`{"amount":` + strconv.FormatInt(1000+i, 10) + `}`),
					}, ledger.DefaultPolicy(), t0)
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					if keyed {
						ctx = ledger.WithIdempotency(ctx, ledger.Idempotency{Scope: "acme",
							KeyHash: ledger.IdempotencyKeyHash("bench-" + strconv.FormatInt(i, 10)), Request: "r", At: t0})
					}
					if res, err := s.Claim(ctx, c); err != nil || res.Decision != ledger.DecisionProceed {
						b.Fatalf("claim %d: %s %v", i, res.Decision, err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}
