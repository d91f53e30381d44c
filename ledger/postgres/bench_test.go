package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentledger/reconciler/ledger"
)

// benchCallers is the number of concurrent callers (agent runtimes).
const benchCallers = 64

// benchConns is the pool size of both measurements: on a 2-core database
// more connections add contention, not throughput.
const benchConns = 16

// claimsPerSec of the last ledger run, for the ratio the bare run reports.
var claimsPerSec atomic.Uint64

// BenchmarkClaimPostgres measures Claim (a new key: proceed) from 64
// concurrent callers, then the floor under it: a bare INSERT … ON CONFLICT
// DO NOTHING of a row of the same shape from 64 callers, one autocommit
// statement each. The bare run reports ledger/bare, the fraction of the
// database's raw insert rate that a full claim transaction keeps.
//
//	RECONCILER_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	  go test -run '^$' -bench BenchmarkClaimPostgres -benchtime 4000x ./ledger/postgres/
func BenchmarkClaimPostgres(b *testing.B) {
	db := sharedDB(b)
	b.Run("ledger", func(b *testing.B) {
		s := openStore(b, newSchema(b, db), Options{MaxConns: benchConns})
		claims := make([]ledger.Claim, b.N)
		for i := range claims {
			c, err := ledger.NewClaim(ledger.ClaimRequest{
				Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", ToolCallID: "call_1", Vendor: "stripe",
				ToolClass: ledger.ClassWriteIdempotent, Intent: []byte(fmt.Sprintf(`{"amount":%d,"currency":"usd"}`, i)),
				ReplayWindow: 24 * time.Hour,
			}, ledger.DefaultPolicy(), t0)
			if err != nil {
				b.Fatal(err)
			}
			claims[i] = c
		}
		rate := parallel(b, func(ctx context.Context, i int) error {
			res, err := s.Claim(ctx, claims[i])
			if err == nil && res.Decision != ledger.DecisionProceed {
				err = fmt.Errorf("decision %s, want proceed", res.Decision)
			}
			return err
		})
		claimsPerSec.Store(uint64(rate))
		b.ReportMetric(rate, "claims/s")
		b.ReportMetric(float64(s.Retries()), "retries")
	})
	b.Run("bare_insert", func(b *testing.B) {
		u := newSchema(b, db)
		// The schema, through Open; the inserts go through a pool of their own.
		_ = openStore(b, u, Options{})
		pool, err := pgxpool.New(context.Background(), withParams(b, u, "pool_max_conns", fmt.Sprint(benchConns)))
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", ToolCallID: "call_1", Vendor: "stripe",
			ToolClass: ledger.ClassWriteIdempotent, Intent: []byte(`{"amount":1,"currency":"usd"}`), ReplayWindow: 24 * time.Hour,
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			b.Fatal(err)
		}
		row := c.Row
		rate := parallel(b, func(ctx context.Context, i int) error {
			r := row
			r.Key = fmt.Sprintf("%064x", i)
			r.MetadataLocalID = ledger.LocalID(r.Tenant, r.Key)
			doc, err := encodeRow(r)
			if err != nil {
				return err
			}
			_, err = pool.Exec(ctx, `INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb) ON CONFLICT DO NOTHING`,
				r.Tenant, r.Key, r.MetadataLocalID, string(r.Status), r.RunID, micros(r.FirstSeenAt), nullTime(r.NextCheckAt), doc)
			return err
		})
		b.ReportMetric(rate, "inserts/s")
		if c := claimsPerSec.Load(); c > 0 {
			b.ReportMetric(float64(c)/rate, "ledger/bare")
		}
	})
}

// parallel runs op for i in [0, b.N) from benchCallers goroutines and
// returns operations per second.
func parallel(b *testing.B, op func(ctx context.Context, i int) error) float64 {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		once sync.Once
		ferr error
	)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for range benchCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(ctx, i); err != nil {
					once.Do(func() { ferr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if ferr != nil {
		b.Fatal(ferr)
	}
	return float64(b.N) / elapsed.Seconds()
}
