package postgres

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// TestRegistrySharedAndDurable: the tool registry of two stores on one
// schema (two replicas) is one registry, and it outlives the stores.
func TestRegistrySharedAndDurable(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	ctx := t.Context()
	entry := ledger.Tool{
		Tenant: "acme", Name: "stripe.payment_intents.create", Vendor: "stripe", Class: ledger.ClassWriteIdempotent,
		SideEffect: "charge", KeyPlacement: ledger.KeyPlacement{Header: "Idempotency-Key"},
		Policy: `intent.amount <= 50000`, UpdatedAt: t0,
	}
	stored, _, err := a.PutTool(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.GetTool(ctx, "acme", entry.Name)
	if err != nil || got.Version != 1 || got.Policy != entry.Policy {
		t.Fatalf("B's GetTool: %+v %v", got, err)
	}
	entry.Policy, entry.UpdatedAt = `intent.amount <= 100`, t0.Add(time.Minute)
	if next, _, err := b.PutTool(ctx, entry); err != nil || next.Version != 2 || !next.CreatedAt.Equal(stored.CreatedAt) {
		t.Fatalf("B's PutTool: %+v %v", next, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c := openStore(t, u, Options{})
	list, err := c.ListTools(ctx, "")
	if err != nil || len(list) != 1 || list[0].Version != 2 || list[0].Policy != `intent.amount <= 100` {
		t.Fatalf("after both replicas closed: %+v %v", list, err)
	}
}

// TestExpiryAcrossReplicas: the expiry jobs of two replicas walk the same
// due approvals at once; each request expires once, with one outbox record.
func TestExpiryAcrossReplicas(t *testing.T) {
	u := newSchema(t, sharedDB(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	ctx := t.Context()
	const n = 30
	for i := range n {
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run_1", Tool: "email.send", Vendor: "resend", ToolClass: ledger.ClassWriteIrreversible,
			Intent: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
			Gate:   ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "a write_irreversible tool is never autonomous", ApprovalTTL: time.Minute},
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := a.Claim(ctx, c); err != nil || res.Decision != ledger.DecisionAwaitApproval {
			t.Fatalf("claim %d: %s %v", i, res.Decision, err)
		}
	}
	now := t0.Add(time.Hour)
	var (
		mu      sync.Mutex
		expired = map[string]int{}
		wg      sync.WaitGroup
	)
	for _, s := range []*Store{a, b} {
		wg.Go(func() {
			q := ledger.ApprovalQuery{DueBy: now, Limit: 7}
			for {
				page, err := s.ListApprovals(ctx, q)
				if err != nil {
					t.Errorf("ListApprovals: %v", err)
					return
				}
				for _, r := range page.Rows {
					row, ch, err := s.DecideApproval(ctx, ledger.ApprovalDecision{ID: r.Approval.ID, Verdict: ledger.VerdictExpire, At: now})
					if err != nil {
						t.Errorf("DecideApproval: %v", err)
						continue
					}
					if ch.Event != nil {
						mu.Lock()
						expired[row.Key]++
						mu.Unlock()
					}
				}
				if page.NextCursor == "" {
					return
				}
				q.Cursor = page.NextCursor
			}
		})
	}
	wg.Wait()
	if len(expired) != n {
		t.Fatalf("%d requests expired, want %d", len(expired), n)
	}
	for key, times := range expired {
		if times != 1 {
			t.Fatalf("request of %s expired %d times", key, times)
		}
	}
	recs, err := a.PendingEvents(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, r := range recs {
		if r.Event.Status == ledger.EventApprovalExpired {
			count++
		}
	}
	if count != n {
		t.Fatalf("%d approval_expired records, want %d", count, n)
	}
	if page, err := b.ListApprovals(ctx, ledger.ApprovalQuery{}); err != nil || len(page.Rows) != 0 {
		t.Fatalf("open approvals left: %d %v", len(page.Rows), err)
	}
}
