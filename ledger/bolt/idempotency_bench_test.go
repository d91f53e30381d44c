package bolt

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

// BenchmarkClaimIdempotencyKey is BenchmarkClaim at 16 callers without
// and with an Idempotency-Key on every claim (a new value each): the
// record is one more insert in the claim's group commit. BENCHMARKS.md
// ("Idempotency-Key") compares the two.
func BenchmarkClaimIdempotencyKey(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("keyed=%v", keyed), func(b *testing.B) {
			s := mustOpen(b, Options{Policy: ledger.DefaultPolicy()})
			cpu0 := processCPU(b)
			runCallers(b, 16, "claims/s", func(i int) error {
				ctx := context.Background()
				c := benchClaim(b, i)
				if keyed {
					ctx = ledger.WithIdempotency(ctx, ledger.Idempotency{Scope: "acme",
						KeyHash: ledger.IdempotencyKeyHash("bench-" + strconv.Itoa(i)), Request: "r" + strconv.Itoa(i), At: c.At})
				}
				res, err := s.Claim(ctx, c)
				if err == nil && res.Decision != ledger.DecisionProceed {
					err = fmt.Errorf("claim %d: %s", i, res.Decision)
				}
				return err
			})
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/claim")
			reportGroups(b, s)
		})
	}
}
