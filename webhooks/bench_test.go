package webhooks_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/webhooks"
)

// discardStore acknowledges every delivery without storing it: the
// verify-only baseline.
type discardStore struct{}

func (discardStore) Ingest(context.Context, ledger.Delivery) (ledger.IngestResult, error) {
	return ledger.IngestResult{Outcome: ledger.IngestAccepted}, nil
}

// BenchmarkStripeIngest measures one Stripe delivery through the echo
// handler (logging JSON at info, as serve does) at 64 concurrent senders: verify_only (signature, timestamp,
// decode, match; no store) against bolt (the same plus a durable
// ledger/bolt Ingest: inbox, row, outbox, fsync'd group commit). Each
// iteration also signs its delivery (one HMAC, as the verifier does), in
// both cases. Every event id is fresh, and events join 256 claimed rows.
//
//	go test -run '^$' -bench BenchmarkStripeIngest -benchtime 3s ./webhooks/
func BenchmarkStripeIngest(b *testing.B) {
	for _, tc := range []struct {
		name  string
		store func(b *testing.B) (webhooks.Ingester, []string)
	}{
		{"verify_only", func(b *testing.B) (webhooks.Ingester, []string) {
			return discardStore{}, []string{"rl_00000000000000000000000000000000"}
		}},
		{"bolt", func(b *testing.B) (webhooks.Ingester, []string) {
			st := openBolt(b)
			var lids []string
			for i := range 256 {
				lids = append(lids, claimRow(b, st, "acme", fmt.Sprintf("run-%d", i), nil).MetadataLocalID)
			}
			return st, lids
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			store, lids := tc.store(b)
			now := time.Now()
			h, err := webhooks.New(webhooks.Options{
				Store:      store,
				Stripe:     []webhooks.StripeEndpoint{{Name: "default", Tenant: "acme", Secrets: []string{stripeSecret}}},
				Registerer: prometheus.NewRegistry(),
				Now:        func() time.Time { return now },
				// As serve logs: JSON at info (here into io.Discard).
				Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
			})
			if err != nil {
				b.Fatal(err)
			}
			e := echo.New()
			h.Register(e)
			// The fixture with its event id and local id cut out, so each
			// iteration only concatenates.
			tmpl := fixtures.Load(piSucceeded)
			head, tail, ok := bytes.Cut(tmpl, []byte(`"evt_3PWcJ2LkdIwHu7ix0Ab1Suc0"`))
			if !ok {
				b.Fatal("fixture id not found")
			}
			var seq atomic.Int64
			var failed atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					lid := lids[int(n)%len(lids)]
					body := make([]byte, 0, len(tmpl)+64)
					body = append(body, head...)
					body = fmt.Appendf(body, `"evt_bench_%d"`, n)
					body = append(body, bytes.Replace(tail, []byte(fixtures.PlaceholderLocalID), []byte(lid), 1)...)
					req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
					req.Header.Set("Stripe-Signature", fixtures.SignStripe(body, now, stripeSecret))
					rec := httptest.NewRecorder()
					e.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						failed.Add(1)
					}
				}
			})
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d deliveries failed", f)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
			if st, ok := store.(*bolt.Store); ok {
				if s := st.Stats(); s.Groups > 0 {
					b.ReportMetric(float64(s.Ops)/float64(s.Groups), "ops/group")
					b.ReportMetric(float64(s.CommitTime.Microseconds())/float64(s.Groups), "commit-µs/group")
					b.ReportMetric(float64(s.RunTime.Microseconds())/float64(s.Groups), "run-µs/group")
				}
			}
		})
	}
}

// BenchmarkMailgunIngest measures one Mailgun delivery through the echo
// handler into bolt at 64 concurrent senders, each with a fresh token and
// event id (the token is recorded in the inbox with the event):
// applied (no vendor profile: the body's outcome applies) against hint
// (a profile: recorded, joined, the row made due, no outcome).
//
//	go test -run '^$' -bench BenchmarkMailgunIngest -benchtime 3s ./webhooks/
func BenchmarkMailgunIngest(b *testing.B) {
	for _, tc := range []struct {
		name    string
		refetch map[string]bool
	}{{"applied", nil}, {"hint", map[string]bool{"mailgun": true}}} {
		b.Run(tc.name, func(b *testing.B) {
			st := openBolt(b)
			var lids []string
			for i := range 256 {
				lids = append(lids, claimRow(b, st, "acme", fmt.Sprintf("run-%d", i), nil).MetadataLocalID)
			}
			h, err := webhooks.New(webhooks.Options{
				Store:      st,
				Presets:    []webhooks.PresetEndpoint{{Name: "mg", Preset: "mailgun", Tenant: "acme", Secrets: []string{mailgunSigningKey}}},
				Refetch:    tc.refetch,
				Registerer: prometheus.NewRegistry(),
				Now:        func() time.Time { return t0 },
			})
			if err != nil {
				b.Fatal(err)
			}
			e := echo.New()
			h.Register(e)
			var seq, failed atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					d := mailgunDelivery(fmt.Sprintf("tok-%048d", n), fmt.Sprintf("ev-%d", n), "accepted", "m@mg.example.com", lids[int(n)%len(lids)])
					req := httptest.NewRequest(http.MethodPost, d.path, bytes.NewReader(d.body))
					rec := httptest.NewRecorder()
					e.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						failed.Add(1)
					}
				}
			})
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d deliveries failed", f)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}
