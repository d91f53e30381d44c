package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/memstore"
)

// BenchmarkClaimAPI measures the claim path of the API in process: a POST
// /v1/claims of a new intent through Handler (auth, strict decoding, the
// claim, the answer) on a memstore, from parallel callers, each request
// with an agent's traceparent header. The store is memory so that the
// API's own cost shows; with bolt an fsync dwarfs it. Tracing is off (no
// TracerProvider). BENCHMARKS.md compares it across commits, and against
// BenchmarkClaimAPITraced.
func BenchmarkClaimAPI(b *testing.B) {
	benchClaims(b, api.Options{})
}

// BenchmarkClaimAPIIdempotencyKey is BenchmarkClaimAPI without and with
// an Idempotency-Key on every claim (a new value each), on the memstore
// (the API's own cost: the check, the request's fingerprint, the in-flight
// set, the record) and on bbolt (the claim path as served: a group commit
// per batch), in one run. BENCHMARKS.md compares them.
func BenchmarkClaimAPIIdempotencyKey(b *testing.B) {
	for _, store := range []string{"memstore", "bolt"} {
		for _, keyed := range []bool{false, true} {
			name := store + "/without"
			if keyed {
				name = store + "/with"
			}
			b.Run(name, func(b *testing.B) {
				o := api.Options{}
				if store == "bolt" {
					st, err := bolt.Open(filepath.Join(b.TempDir(), "ledger.db"), bolt.Options{Policy: ledger.DefaultPolicy()})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = st.Close() })
					o.Store = st
				}
				benchClaimsWith(b, o, keyed)
			})
		}
	}
}

// benchClaims runs the claims against a Server built with o (its store,
// tokens and policy are set here).
func benchClaims(b *testing.B, o api.Options) { benchClaimsWith(b, o, false) }

// benchClaimsWith is benchClaims, each claim with its own Idempotency-Key
// when keyed; o.Store, when set, replaces the memstore.
func benchClaimsWith(b *testing.B, o api.Options, keyed bool) {
	if o.Store == nil {
		st := memstore.New(ledger.DefaultPolicy())
		b.Cleanup(func() { _ = st.Close() })
		o.Store = st
	}
	o.Tokens, o.Policy = map[string]string{tokenAcme: "acme"}, ledger.DefaultPolicy()
	o.ReplayWindow = func(string, *ledger.Request) time.Duration { return 24 * time.Hour }
	srv, err := api.New(o)
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			body := fmt.Sprintf(`{"run_id":"run_bench","tool":"stripe.payment_intents.create","tool_call_id":"call_%d",`+
				`"vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":%d,"currency":"usd"}}`, i, i)
			req := httptest.NewRequest(http.MethodPost, "/v1/claims", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tokenAcme)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			if keyed {
				req.Header.Set(api.IdempotencyKeyHeader, benchKey(i))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				b.Fatalf("claim = %d %s", rec.Code, rec.Body)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	// The process's CPU per claim (GC included) varies less than the
	// throughput on a shared machine: BENCHMARKS.md compares both.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/claim")
}

// benchKey is the i-th claim's Idempotency-Key value, made about as
// cheaply as a client's UUID generator makes one: minting the value is the
// caller's cost, not the claim path's, and fmt.Sprintf("%032x") is a slow
// way to make one (its cost would be counted as the header's).
func benchKey(i int64) string {
	var buf [40]byte
	return string(strconv.AppendInt(append(buf[:0], "bench-key-"...), 1e12+i, 10))
}

// processCPU is the user plus system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
