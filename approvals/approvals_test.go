package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/approvals"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/paging"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// gatedClaim inserts a row awaiting approval, requested at t0 for ttl.
func gatedClaim(t *testing.T, st *memstore.Store, run string, ttl time.Duration) ledger.Row {
	t.Helper()
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: run, Tool: "email.send", Vendor: "resend", ToolClass: ledger.ClassWriteIrreversible,
		Intent: json.RawMessage(`{"to":"a@example.com"}`),
		Gate:   ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "a write_irreversible tool is never autonomous", ApprovalTTL: ttl},
	}, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Claim(t.Context(), c)
	if err != nil || res.Decision != ledger.DecisionAwaitApproval {
		t.Fatalf("claim: %s %v", res.Decision, err)
	}
	return res.Row
}

func get(t *testing.T, st *memstore.Store, r ledger.Row) ledger.Row {
	t.Helper()
	got, err := st.Get(t.Context(), r.Tenant, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestExpirerPass(t *testing.T) {
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })
	clk := &clock{now: t0}
	short := gatedClaim(t, st, "run_1", time.Minute)
	long := gatedClaim(t, st, "run_2", time.Hour)
	granted := gatedClaim(t, st, "run_3", time.Minute)
	if _, _, err := st.DecideApproval(t.Context(), ledger.ApprovalDecision{ID: granted.Approval.ID, Verdict: ledger.VerdictGrant, Actor: "alice", At: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var woken []string
	x := approvals.NewExpirer(st, approvals.ExpirerOptions{Now: clk.Now, Batch: 1, Expired: func(tenant, key string) {
		mu.Lock()
		defer mu.Unlock()
		woken = append(woken, tenant+"/"+key)
	}})
	if n, err := x.Pass(t.Context()); n != 0 || err != nil {
		t.Fatalf("pass before any expiry: %d %v", n, err)
	}
	clk.Set(t0.Add(2 * time.Minute))
	if n, err := x.Pass(t.Context()); n != 1 || err != nil {
		t.Fatalf("pass at +2m: %d %v, want 1", n, err)
	}
	if got := get(t, st, short); got.Status != ledger.StatusFailedPoison || got.Approval.State != ledger.ApprovalExpired {
		t.Fatalf("short: %s %s", got.Status, got.Approval.State)
	}
	if got := get(t, st, long); got.Approval.State != ledger.ApprovalRequested {
		t.Fatalf("long: %s, want still requested", got.Approval.State)
	}
	if got := get(t, st, granted); got.Approval.State != ledger.ApprovalGranted || got.Status != ledger.StatusPending {
		t.Fatalf("a granted approval was expired: %s %s", got.Status, got.Approval.State)
	}
	mu.Lock()
	if len(woken) != 1 || woken[0] != "acme/"+short.Key {
		t.Fatalf("Expired hook: %v", woken)
	}
	mu.Unlock()
	// Many expirers at once (replicas): each request expires once.
	for i := range 20 {
		gatedClaim(t, st, "run_many_"+string(rune('a'+i)), 30*time.Minute)
	}
	clk.Set(t0.Add(2 * time.Hour))
	var wg sync.WaitGroup
	counts := make(chan int, 4)
	for range 4 {
		wg.Go(func() {
			n, err := approvals.NewExpirer(st, approvals.ExpirerOptions{Now: clk.Now, Batch: 3}).Pass(t.Context())
			if err != nil {
				t.Errorf("Pass: %v", err)
			}
			counts <- n
		})
	}
	wg.Wait()
	close(counts)
	total := 0
	for n := range counts {
		total += n
	}
	if total != 21 {
		t.Fatalf("4 expirers expired %d requests in all, want 21 (20 new and the long one)", total)
	}
	if page, _ := st.ListApprovals(t.Context(), ledger.ApprovalQuery{}); len(page.Rows) != 0 {
		t.Fatalf("%d open approvals left", len(page.Rows))
	}
	if err := st.CheckConsistency(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestExpirerRunStops(t *testing.T) {
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })
	row := gatedClaim(t, st, "run_1", time.Minute)
	x := approvals.NewExpirer(st, approvals.ExpirerOptions{Interval: 5 * time.Millisecond, Now: func() time.Time { return t0.Add(time.Hour) }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for get(t, st, row).Approval.State != ledger.ApprovalExpired {
		if time.Now().After(deadline) {
			t.Fatal("Run never expired the request")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// fakePager records calls; fail makes every call fail.
type fakePager struct {
	mu    sync.Mutex
	calls []string
	pages []paging.Page
	fail  bool
}

func (p *fakePager) Trigger(_ context.Context, pg paging.Page) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "trigger "+pg.DedupKey)
	p.pages = append(p.pages, pg)
	if p.fail {
		return paging.ErrUndelivered
	}
	return nil
}

func (p *fakePager) Resolve(_ context.Context, dk string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "resolve "+dk)
	if p.fail {
		return paging.ErrUndelivered
	}
	return nil
}

func (p *fakePager) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

func requested() ledger.Event {
	return ledger.Event{
		Key: "k1", Tenant: "acme", RunID: "run_1", Tool: "email.send", Status: ledger.EventApprovalRequested, Source: ledger.SourceRuntime, At: t0,
		Approval: &ledger.Approval{ID: ledger.ApprovalID("acme", "k1"), State: ledger.ApprovalRequested, Reason: "policy: intent.amount < 5",
			RequestedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)},
	}
}

func TestNotifierHandleEvent(t *testing.T) {
	webhook, pd := &fakePager{}, &fakePager{}
	n := approvals.NewNotifier(approvals.NotifierOptions{Pagers: []approvals.Pager{webhook, pd}})
	if err := n.HandleEvent(t.Context(), requested()); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{ledger.EventApproved, "succeeded", ledger.EventEscalated} {
		ev := requested()
		ev.Status = st
		if err := n.HandleEvent(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	want := "trigger recon:acme:k1:approval,resolve recon:acme:k1:approval"
	for name, p := range map[string]*fakePager{"webhook": webhook, "pagerduty": pd} {
		if got := strings.Join(p.got(), ","); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	pg := webhook.pages[0]
	if pg.Severity != paging.SeverityInfo || !strings.Contains(pg.Summary, "policy: intent.amount < 5") || !strings.Contains(pg.Summary, "ap_") ||
		pg.CustomDetails["approve"] != "POST /v1/approvals/"+requested().Approval.ID+"/approve" {
		t.Fatalf("page: %+v", pg)
	}
	t.Run("a failing pager does not keep the others from being asked", func(t *testing.T) {
		down, up := &fakePager{fail: true}, &fakePager{}
		n := approvals.NewNotifier(approvals.NotifierOptions{Pagers: []approvals.Pager{down, up}})
		ev := requested()
		ev.Status = ledger.EventDenied
		if err := n.HandleEvent(t.Context(), ev); !errors.Is(err, paging.ErrUndelivered) {
			t.Fatalf("HandleEvent: %v, want ErrUndelivered", err)
		}
		if len(up.got()) != 1 {
			t.Fatalf("the working pager got %v", up.got())
		}
	})
}

// TestNotifierConsume: a request that cannot be paged at first is paged
// once the pager is back, and the decision closes it.
func TestNotifierConsume(t *testing.T) {
	js := natstest.JetStream(t)
	p := &fakePager{fail: true}
	n := approvals.NewNotifier(approvals.NotifierOptions{Pagers: []approvals.Pager{p}, Timeout: 200 * time.Millisecond, RetryDelay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Consume(ctx, js) }()
	publish := func(ev ledger.Event) {
		b, _ := json.Marshal(ev)
		if _, err := js.Publish(t.Context(), "recon.acme.run_1."+ev.Status, b); err != nil {
			t.Fatal(err)
		}
	}
	publish(requested())
	other := requested()
	other.Status = "succeeded"
	publish(other) // not an approval event: filtered out
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (calls %v)", what, p.got())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("a failed trigger", func() bool { return len(p.got()) >= 2 })
	p.mu.Lock()
	p.fail = false
	p.mu.Unlock()
	approved := requested()
	approved.Status = ledger.EventApproved
	publish(approved)
	wait("the resolve", func() bool {
		calls := p.got()
		return len(calls) > 0 && calls[len(calls)-1] == "resolve recon:acme:k1:approval"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range p.got() {
		if !strings.HasSuffix(c, "recon:acme:k1:approval") {
			t.Fatalf("a call for another event: %v", p.got())
		}
	}
}
