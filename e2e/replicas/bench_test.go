package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/postgres"
)

// Replica benchmarks (issue 7 item 4). Run them in one go with
// scripts/bench-replicas.sh, or:
//
//	RECONCILER_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	  go test -run '^$' -bench . -benchtime 3000x ./e2e/replicas/

// benchCallers is the number of concurrent callers (agent runtimes).
const benchCallers = 64

// benchConns is the PostgreSQL pool size of the store and of the bare
// loop alike: on a 2-core database more connections add contention only.
const benchConns = 16

// claimSeq makes every benchmark claim a new intent, across the runs a
// benchmark function makes with growing b.N.
var claimSeq atomic.Int64

func newBenchClaim(tb testing.TB) ledger.Claim {
	i := claimSeq.Add(1)
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_bench", Tool: "stripe.payment_intents.create", ToolCallID: "call_" + strconv.FormatInt(i, 10),
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, ReplayWindow: 24 * time.Hour,
		Intent: json.RawMessage(`{"amount":` + strconv.FormatInt(1000+i, 10) + `,"currency":"usd","customer":"cus_bench"}`),
	}, ledger.DefaultPolicy(), time.Now().UTC())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// parallel runs b.N calls of op from benchCallers goroutines and reports
// calls per second under unit.
func parallel(b *testing.B, unit string, op func(ctx context.Context, i int) error) {
	b.Helper()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for range benchCallers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := op(ctx, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}

// BenchmarkClaims64 measures claims/s from 64 concurrent callers, in one
// process and one run: the PostgreSQL store, the bbolt store, and the
// hand-rolled floor under the PostgreSQL store (one autocommit INSERT …
// ON CONFLICT DO NOTHING of a row of the same shape into the store's own
// table, the Stripe-style idempotency-key approach). Every write is
// durable (synchronous_commit on; bbolt fsyncs each group).
func BenchmarkClaims64(b *testing.B) {
	pgtest.BaseURL(b) // skips without PostgreSQL
	b.Run("store=postgres", func(b *testing.B) {
		s, err := postgres.Open(context.Background(), pgtest.Schema(b), postgres.Options{MaxConns: benchConns})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		parallel(b, "claims/s", func(ctx context.Context, i int) error {
			return proceed(s.Claim(ctx, newBenchClaim(b)))
		})
	})
	b.Run("store=bolt", func(b *testing.B) {
		s, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		parallel(b, "claims/s", func(ctx context.Context, i int) error {
			return proceed(s.Claim(ctx, newBenchClaim(b)))
		})
	})
	b.Run("bare_insert", func(b *testing.B) {
		u := pgtest.Schema(b)
		s, err := postgres.Open(context.Background(), u, postgres.Options{}) // the schema
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = benchConns
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		parallel(b, "claims/s", func(ctx context.Context, i int) error {
			r := newBenchClaim(b).Row
			doc, err := json.Marshal(map[string]any{"v": 1, "row": r})
			if err != nil {
				return err
			}
			tag, err := pool.Exec(ctx, `INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb) ON CONFLICT DO NOTHING`,
				r.Tenant, r.Key, r.MetadataLocalID, string(r.Status), r.RunID, r.FirstSeenAt, r.NextCheckAt, doc)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("insert %s: not inserted", r.Key)
			}
			return err
		})
	})
}

func proceed(res ledger.ClaimResult, err error) error {
	if err == nil && res.Decision != ledger.DecisionProceed {
		err = fmt.Errorf("decision %s, want proceed", res.Decision)
	}
	return err
}

// BenchmarkHTTPClaims measures POST /v1/claims through HTTP from 64
// callers against 1 and against 3 `reconciler serve` processes on one
// PostgreSQL database (callers spread round-robin, as behind a load
// balancer). Each replica set starts once, outside the timer; every
// replica, the database and the load share this machine's cores.
func BenchmarkHTTPClaims(b *testing.B) {
	skipUnlessReplicas(b)
	bin := sharedBinary(b)
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	for _, n := range []int{1, 3} {
		stream := fmt.Sprintf("RTB%d_%s", n, strings.ToUpper(run))
		natsJS(b, stream)
		var c *cluster
		var cl *client
		b.Run(fmt.Sprintf("replicas=%d", n), func(sb *testing.B) {
			if c == nil {
				// Started on the parent: the sub-benchmark function runs
				// once per b.N, the processes live across those runs. c is
				// set only once every replica started: a start that failed
				// (b.Fatal ends this goroutine) must not leave a half-made
				// set for the next b.N to use.
				nc := newCluster(b, bin, pgtest.Database(b), stream, fmt.Sprintf("rtb%d%s", n, run), "", n)
				nc.resolverIntervalArg = "30s"
				for i := range n {
					nc.start(i)
				}
				c, cl = nc, newClient(nc.addrs())
			}
			if cl == nil {
				sb.Fatalf("the %d-replica set did not start", n)
			}
			parallel(sb, "claims/s", func(ctx context.Context, i int) error {
				body := fmt.Sprintf(`{"run_id":"run_bench","tool":"stripe.payment_intents.create","tool_call_id":"call_%d",
					"vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":%d,"currency":"usd"}}`, i, claimSeq.Add(1))
				code, b, err := cl.api(ctx, i%n, http.MethodPost, "/v1/claims", body)
				if err == nil && code != http.StatusCreated {
					err = fmt.Errorf("claim: %d %s", code, b)
				}
				return err
			})
		})
	}
}
