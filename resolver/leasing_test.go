package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/postgres"
	"github.com/agentledger/reconciler/resolver"
)

var _ resolver.DueClaimer = (*postgres.Store)(nil)

// countingLookup finds every row settled and counts the lookups per key
// and how many run at once per key.
type countingLookup struct {
	mu      sync.Mutex
	finds   map[string]int
	active  map[string]int
	overlap int
}

func (l *countingLookup) Retrieve(ctx context.Context, row ledger.Row) (resolver.Finding, error) {
	return resolver.Finding{}, nil
}

func (l *countingLookup) Find(ctx context.Context, row ledger.Row) (resolver.Finding, error) {
	l.mu.Lock()
	l.finds[row.Key]++
	l.active[row.Key]++
	if l.active[row.Key] > 1 {
		l.overlap++
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.active[row.Key]--
		l.mu.Unlock()
	}()
	return resolver.Finding{Found: true, Status: ledger.StatusSucceeded, ReceiptID: "pi_" + row.MetadataLocalID}, nil
}

func (l *countingLookup) Replay(ctx context.Context, row ledger.Row) (resolver.Finding, error) {
	return resolver.Finding{}, fmt.Errorf("replay of %s: not expected", row.Key)
}

// TestResolversShareDueRows: two resolvers on two Stores over one
// PostgreSQL schema pass concurrently over the same due rows in small
// batches; ClaimDue must hand every row to one of them only.
func TestResolversShareDueRows(t *testing.T) {
	u := pgtest.Schema(t)
	stores := pgtest.Stores(t, 2, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, u, postgres.Options{}) })
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const rows = 60
	for i := range rows {
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
			ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			ReplayWindow: time.Hour,
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			t.Fatalf("new claim: %v", err)
		}
		if _, err := stores[i%2].Claim(ctx, c); err != nil {
			t.Fatalf("claim: %v", err)
		}
	}
	// Every row is due and past its search lag at the resolvers' time.
	now := func() time.Time { return t0.Add(3 * time.Hour) }
	lk := &countingLookup{finds: map[string]int{}, active: map[string]int{}}
	var wg sync.WaitGroup
	var passes [2]int
	for i, s := range stores {
		res := resolver.New(s, resolver.Options{
			Lookups: map[string]resolver.Lookup{"stripe": lk}, Limit: 4, Workers: 2, Now: now,
		})
		wg.Go(func() {
			for range 200 { // bound: a broken lease would loop forever
				due, err := s.Due(ctx, now(), 1)
				if err != nil {
					t.Errorf("due: %v", err)
					return
				}
				if len(due) == 0 {
					return
				}
				if err := res.Pass(ctx); err != nil {
					t.Errorf("pass: %v", err)
					return
				}
				passes[i]++
			}
		})
	}
	wg.Wait()

	t.Run("every row worked once", func(t *testing.T) {
		if got := len(lk.finds); got != rows {
			t.Errorf("rows looked up: got %d, want %d", got, rows)
		}
		for key, n := range lk.finds {
			if n != 1 {
				t.Errorf("key %s: looked up %d times, want 1", key, n)
			}
		}
		if lk.overlap != 0 {
			t.Errorf("lookups of one key at once: got %d, want 0", lk.overlap)
		}
	})
	t.Run("every row settled once", func(t *testing.T) {
		recs, err := stores[0].PendingEvents(ctx, 10*rows)
		if err != nil {
			t.Fatal(err)
		}
		perKey := map[string]int{}
		for _, r := range recs {
			if r.Event.Status == string(ledger.StatusSucceeded) {
				perKey[r.Event.Key]++
			}
		}
		if len(perKey) != rows {
			t.Errorf("keys with a succeeded event: got %d, want %d", len(perKey), rows)
		}
		for k, n := range perKey {
			if n != 1 {
				t.Errorf("key %s: %d succeeded events, want 1", k, n)
			}
		}
	})
	t.Logf("passes: resolver 0 %d, resolver 1 %d", passes[0], passes[1])
}
