package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentledger/reconciler/ledger"
)

// TestRaces: the interleavings that the locks of pgTx exist for, run many
// times over with real concurrency.
func TestRaces(t *testing.T) {
	db := sharedDB(t)
	t.Run("a webhook racing the claim of its row is never lost", func(t *testing.T) {
		s := openStore(t, newSchema(t, db), Options{MaxConns: 4})
		warm(t, s, 4)
		for i := range 20 {
			c, err := ledger.NewClaim(ledger.ClaimRequest{
				Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
				ToolClass: ledger.ClassWriteIdempotent, Intent: []byte(fmt.Sprintf(`{"race":%d}`, i)), ReplayWindow: time.Hour,
			}, ledger.DefaultPolicy(), t0)
			if err != nil {
				t.Fatal(err)
			}
			d := ledger.Delivery{
				Tenant: "acme", Vendor: "stripe", EventID: fmt.Sprintf("evt_%d", i), LocalID: c.Row.MetadataLocalID,
				Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_x", At: t0.Add(time.Second)},
				At:       t0.Add(time.Second),
			}
			var wg sync.WaitGroup
			var claimErr, ingestErr error
			var ingest ledger.IngestResult
			wg.Add(2)
			go func() { defer wg.Done(); _, claimErr = s.Claim(context.Background(), c) }()
			go func() { defer wg.Done(); ingest, ingestErr = s.Ingest(context.Background(), d) }()
			wg.Wait()
			if claimErr != nil || ingestErr != nil {
				t.Fatalf("round %d: Claim %v, Ingest %v", i, claimErr, ingestErr)
			}
			row, err := s.Get(t.Context(), "acme", c.Row.Key)
			if err != nil {
				t.Fatalf("round %d: Get: %v", i, err)
			}
			// Either the webhook joined the claimed row, or it was parked and
			// the claim applied it: both end succeeded.
			if row.Status != ledger.StatusSucceeded {
				t.Fatalf("round %d: row %s after the race (ingest said %s): the webhook was lost", i, row.Status, ingest.Outcome)
			}
		}
		if err := s.CheckConsistency(t.Context()); err != nil {
			t.Fatalf("CheckConsistency: %v", err)
		}
	})
	t.Run("concurrent deliveries of one event: one accepted, the rest duplicates", func(t *testing.T) {
		const n = 16
		s := openStore(t, newSchema(t, db), Options{MaxConns: n})
		row := claimOne(t, s, "acme", `{"dup":1}`)
		warm(t, s, n)
		outcomes := make([]ledger.IngestOutcome, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := s.Ingest(context.Background(), ledger.Delivery{
					Tenant: "acme", Vendor: "stripe", EventID: "evt_dup", LocalID: row.MetadataLocalID,
					Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: t0.Add(time.Second)},
					At:       t0.Add(time.Second),
				})
				if err != nil {
					t.Errorf("Ingest: %v", err)
				}
				outcomes[i] = res.Outcome
			}()
		}
		close(start)
		wg.Wait()
		counts := map[ledger.IngestOutcome]int{}
		for _, o := range outcomes {
			counts[o]++
		}
		if counts[ledger.IngestAccepted] != 1 || counts[ledger.IngestDuplicate] != n-1 {
			t.Fatalf("outcomes: %v, want 1 accepted and %d duplicate", counts, n-1)
		}
		recs, err := s.PendingEvents(t.Context(), 100)
		if err != nil || len(recs) != 1 {
			t.Fatalf("outbox: %d records, %v; want the one succeeded event", len(recs), err)
		}
	})
}

// TestCheckConsistencyFindsCorruption: the audit is only worth running if
// it notices columns that drifted from the row document.
func TestCheckConsistencyFindsCorruption(t *testing.T) {
	db := sharedDB(t)
	cases := []struct {
		name, sql, want string
	}{
		{"open row missing from the due index", `UPDATE rows SET next_check_at = NULL`, "next_check_at"},
		{"due at a stale time", `UPDATE rows SET next_check_at = next_check_at + interval '1 second'`, "next_check_at"},
		{"status column drifted", `UPDATE rows SET status = 'succeeded'`, "status"},
		{"local id column drifted", `UPDATE rows SET metadata_local_id = 'rl_elsewhere'`, "local id"},
		{"first_seen_at drifted", `UPDATE rows SET first_seen_at = first_seen_at - interval '1 hour'`, "first_seen_at"},
		{"outbox record under another row", `UPDATE outbox SET key = 'other'`, "outbox"},
		{"undecodable row", `UPDATE rows SET doc = '{"v":99}'`, "version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := newSchema(t, db)
			s := openStore(t, u, Options{})
			row := claimOne(t, s, "acme", `{"n":1}`)
			if _, _, err := s.Report(t.Context(), "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Second)}); err != nil {
				t.Fatalf("Report: %v", err)
			}
			if err := s.CheckConsistency(t.Context()); err != nil {
				t.Fatalf("CheckConsistency before corruption: %v", err)
			}
			if _, err := adminConn(t, u).Exec(t.Context(), tc.sql); err != nil {
				t.Fatalf("corrupt: %v", err)
			}
			err := s.CheckConsistency(t.Context())
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("CheckConsistency: got %v, want a problem with %s", err, tc.want)
			}
		})
	}
}

// warm opens n pool connections at once and gives them back, so the racers
// of a test start together instead of queueing behind connection setup.
func warm(t *testing.T, s *Store, n int) {
	t.Helper()
	var conns []*pgxpool.Conn
	for range n {
		c, err := s.pool.Acquire(t.Context())
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
