package postgres

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestRetentionReplicas: two replicas sweep the same expired rows at once
// (every replica runs the retention job); each row is deleted once, by
// one of them, and a claim racing the deletes of its row either sees it or
// starts a new one.
func TestRetentionReplicas(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	ctx := t.Context()
	const n = 60
	for i := range n {
		r := claimOne(t, a, "acme", fmt.Sprintf(`{"n":%d}`, i))
		if _, _, err := a.Report(ctx, "acme", r.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", At: t0.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := a.PendingEvents(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := a.AckEvents(ctx, r.Seq); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := t0.Add(time.Hour)
	var deleted atomic.Int64
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := s.ExpiredRows(ctx, cutoff, 16)
				if err != nil {
					t.Error(err)
					return
				}
				if len(rows) == 0 {
					return
				}
				k, err := s.DeleteExpired(ctx, cutoff, rows)
				if err != nil {
					t.Error(err)
					return
				}
				deleted.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	if deleted.Load() != n {
		t.Fatalf("the replicas deleted %d rows, want %d (each once)", deleted.Load(), n)
	}
	counts, err := a.CountRows(ctx)
	if err != nil || counts[ledger.StatusSucceeded] != 0 {
		t.Fatalf("rows left: %v, %v", counts, err)
	}
	if at, err := b.OldestSettled(ctx); err != nil || !at.IsZero() {
		t.Fatalf("OldestSettled = %v, %v; want none", at, err)
	}
}
