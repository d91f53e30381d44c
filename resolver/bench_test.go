package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/resolver"
)

// foundLookup answers "found, succeeded" at once: the benchmark measures
// the resolver and the store, not a vendor.
type foundLookup struct{}

func (foundLookup) Retrieve(_ context.Context, r ledger.Row) (resolver.Finding, error) {
	return resolver.Finding{Found: true, Status: ledger.StatusSucceeded, ReceiptID: r.UpstreamReceiptID}, nil
}

func (foundLookup) Find(_ context.Context, r ledger.Row) (resolver.Finding, error) {
	return resolver.Finding{Found: true, Status: ledger.StatusSucceeded, ReceiptID: "pi_" + r.Key[:24]}, nil
}

func (foundLookup) Replay(context.Context, ledger.Row) (resolver.Finding, error) {
	return resolver.Finding{}, fmt.Errorf("no replay in the benchmark")
}

const benchDue = 1000

var benchT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// loadRows claims n rows through the store's public API with many
// concurrent callers (so group commit fills its groups) and, when settle is
// true, reports each one's 200 so it leaves the due index.
func loadRows(tb testing.TB, st *bolt.Store, tag string, from, n int, at time.Time, settle bool) {
	tb.Helper()
	const callers = 256
	var next atomic.Int64
	next.Store(int64(from))
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			ctx := context.Background()
			for {
				i := int(next.Add(1) - 1)
				if i >= from+n || firstErr.Load() != nil {
					return
				}
				c, err := ledger.NewClaim(ledger.ClaimRequest{
					Tenant: "bench", RunID: "run" + strconv.Itoa(i%1000), Tool: "stripe.payment_intents.create",
					Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
					Intent:       json.RawMessage(`{"i":` + strconv.Itoa(i) + `,"tag":"` + tag + `"}`),
					ReplayWindow: 24 * time.Hour,
				}, policy, at)
				if err == nil {
					_, err = st.Claim(ctx, c)
				}
				if err == nil && settle {
					_, _, err = st.Report(ctx, "bench", c.Row.Key, ledger.Outcome{
						Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_" + strconv.Itoa(i), At: at,
					})
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkPass is one resolver pass over 1,000 due rows (each found and
// settled through Apply) in a bbolt ledger of 1,000 rows, and in one that
// also holds 1,000,000 settled rows. The due index holds open rows only,
// so the two should cost the same (the issue asks for within 2x).
//
// Loading 1,000,000 rows through the store's API takes minutes, so
// RESOLVER_BENCH_FIXTURE names a file to keep the big ledger in: built on
// the first run, reused by later ones (each run adds its settled rows, a
// few thousand beside the million). Without it the big ledger is built in
// a temporary directory on every run. RESOLVER_BENCH_SETTLED overrides the
// 1,000,000 (a quick local run). Each iteration claims 1,000 fresh due rows
// outside the timer and checks they are due before the timed pass.
//
//	RESOLVER_BENCH_FIXTURE=/tmp/resolver-bench-1m.db RESOLVER_BENCH_REPS=5 \
//	  go test -run '^$' -bench BenchmarkPass -benchtime 10x ./resolver/
func BenchmarkPass(b *testing.B) {
	settled := 1_000_000
	if v := os.Getenv("RESOLVER_BENCH_SETTLED"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		settled = n
	}
	reps := 1
	if v := os.Getenv("RESOLVER_BENCH_REPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		reps = n
	}
	fixture := os.Getenv("RESOLVER_BENCH_FIXTURE")
	// runTag keeps this run's intents (so keys) apart from those of earlier
	// runs on a reused fixture.
	runTag := strconv.FormatInt(time.Now().UnixNano(), 36)
	type ledgerCase struct {
		name string
		st   *bolt.Store
		next int
		at   time.Time
	}
	var cases []*ledgerCase
	for _, settled := range []int{0, settled} {
		path := filepath.Join(b.TempDir(), "ledger.db")
		reuse := false
		if settled > 0 && fixture != "" {
			path = fixture
			_, err := os.Stat(path)
			reuse = err == nil
		}
		st, err := bolt.Open(path, bolt.Options{Policy: policy})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		if settled > 0 && !reuse {
			start := time.Now()
			loadRows(b, st, "fixture", 0, settled, benchT0.Add(-24*time.Hour), true)
			fi, _ := os.Stat(path)
			b.Logf("loaded %d settled rows in %s (%d MiB)", settled, time.Since(start).Round(time.Second), fi.Size()>>20)
		}
		name := "rows=1k"
		if settled > 0 {
			name = fmt.Sprintf("rows=%d+1k", settled)
		}
		cases = append(cases, &ledgerCase{name: name, st: st, at: benchT0})
	}
	// RESOLVER_BENCH_REPS > 1 alternates the two ledgers, so load on a
	// shared machine falls on both alike.
	for range reps {
		for _, tc := range cases {
			b.Run(tc.name, func(b *testing.B) { benchPass(b, tc.st, runTag, &tc.next, &tc.at) })
		}
	}
}

// benchPass times Pass over benchDue fresh due rows per iteration.
func benchPass(b *testing.B, st *bolt.Store, runTag string, next *int, at *time.Time) {
	var clockNow atomic.Int64
	res := resolver.New(st, resolver.Options{
		Lookups: map[string]resolver.Lookup{"stripe": foundLookup{}},
		Limit:   benchDue, Workers: 64, VendorTimeout: 10 * time.Minute,
		Now: func() time.Time { return time.Unix(0, clockNow.Load()) },
	})
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		loadRows(b, st, runTag, *next, benchDue, *at, false)
		*next += benchDue
		clockNow.Store(at.Add(time.Hour).UnixNano())
		*at = at.Add(2 * time.Hour)
		if due, err := st.Due(ctx, time.Unix(0, clockNow.Load()), benchDue+1); err != nil || len(due) != benchDue {
			b.Fatalf("due before the pass = %d (%v), want %d", len(due), err, benchDue)
		}
		b.StartTimer()
		if err := res.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	due, err := st.Due(ctx, time.Unix(0, clockNow.Load()), benchDue)
	if err != nil || len(due) != 0 {
		b.Fatalf("due after the pass = %d (%v), want 0", len(due), err)
	}
	b.ReportMetric(float64(benchDue), "rows/op")
}
