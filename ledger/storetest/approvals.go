package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// approvalTTL is the suite's approval request lifetime.
const approvalTTL = time.Hour

// The token fingerprints of the suite: the claimant's and an approver's.
const (
	claimant = "tok_claimant"
	approver = "tok_approver"
)

// gated sends a claim to approval.
func gated() reqMod {
	return func(r *ledger.ClaimRequest) {
		r.Gate = ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "policy: intent.amount <= 500", ApprovalTTL: approvalTTL, RequestedBy: claimant}
	}
}

func grant(id string, d time.Duration) ledger.ApprovalDecision {
	return ledger.ApprovalDecision{ID: id, Verdict: ledger.VerdictGrant, Actor: "alice@example.com", Note: "looks right", By: approver, At: at(d)}
}

func deny(id string, d time.Duration) ledger.ApprovalDecision {
	return ledger.ApprovalDecision{ID: id, Verdict: ledger.VerdictDeny, Actor: "bob@example.com", Note: "wrong customer", By: approver, At: at(d)}
}

func expiry(id string, d time.Duration) ledger.ApprovalDecision {
	return ledger.ApprovalDecision{ID: id, Verdict: ledger.VerdictExpire, At: at(d)}
}

func (e *env) decide(d ledger.ApprovalDecision) (ledger.Row, ledger.Change) {
	e.t.Helper()
	row, ch, err := e.s.DecideApproval(e.ctx, d)
	if err != nil {
		e.t.Fatalf("DecideApproval(%s %s): %v", d.Verdict, d.ID, err)
	}
	return row, ch
}

// awaiting claims a gated intent at t0 and checks the await_approval answer.
func (e *env) awaiting(mods ...reqMod) ledger.Row {
	e.t.Helper()
	res := e.claim(baseRequest(append([]reqMod{gated()}, mods...)...), t0)
	if res.Decision != ledger.DecisionAwaitApproval || !res.Inserted {
		e.t.Fatalf("gated claim: %s inserted=%v, want await_approval inserted", res.Decision, res.Inserted)
	}
	return res.Row
}

func (e *env) approvals(q ledger.ApprovalQuery) []ledger.Row {
	e.t.Helper()
	var out []ledger.Row
	for pages := 0; ; pages++ {
		if pages > 100 {
			e.t.Fatal("ListApprovals: more than 100 pages; the cursor does not advance")
		}
		page, err := e.s.ListApprovals(e.ctx, q)
		if err != nil {
			e.t.Fatalf("ListApprovals: %v", err)
		}
		out = append(out, page.Rows...)
		if page.NextCursor == "" {
			return out
		}
		q.Cursor = page.NextCursor
	}
}

func approvalIDs(rows []ledger.Row) []string {
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.Tenant+"/"+r.Key)
	}
	return ids
}

// lastEvent is the newest outbox record's message id and approval state.
func (e *env) lastEvent() (string, ledger.Event) {
	e.t.Helper()
	recs := e.pending()
	if len(recs) == 0 {
		e.t.Fatal("outbox is empty")
	}
	ev := recs[len(recs)-1].Event
	return ev.MsgID(), ev
}

// testApprovals checks the approval gate in every store: the rows a gated
// claim inserts, the decisions on them, their outbox records, the index of
// open approvals by expiry, and the errors.
func testApprovals(t *testing.T, open Open) {
	lease := ledger.DefaultPolicy().PendingTTL
	cases := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"a gated claim inserts a pending row at attempt 0 with its approval requested", func(t *testing.T, e *env) {
			row := e.awaiting()
			a := row.Approval
			if row.Status != ledger.StatusPending || row.Attempt != 0 || row.Autonomy != ledger.AutonomyApproval || !row.PendingUntil.IsZero() {
				t.Fatalf("row: status %s attempt %d autonomy %q pending_until %v", row.Status, row.Attempt, row.Autonomy, row.PendingUntil)
			}
			if a == nil || a.ID != ledger.ApprovalID(tenantA, row.Key) || a.State != ledger.ApprovalRequested || a.Reason != "policy: intent.amount <= 500" ||
				!a.RequestedAt.Equal(t0) || !a.ExpiresAt.Equal(at(approvalTTL)) || a.RequestedBy != claimant || !row.NextCheckAt.Equal(a.ExpiresAt) {
				t.Fatalf("approval: %+v next_check_at %v", a, row.NextCheckAt)
			}
			sameRow(t, "stored row", e.get(tenantA, row.Key), row)
			id, ev := e.lastEvent()
			if id != tenantA+":"+row.Key+":"+ledger.EventApprovalRequested || ev.Approval == nil || ev.Approval.ID != a.ID || ev.Source != ledger.SourceRuntime {
				t.Fatalf("outbox: %s %+v", id, ev)
			}
			got, err := e.s.GetApproval(e.ctx, a.ID)
			if err != nil {
				t.Fatalf("GetApproval: %v", err)
			}
			sameRow(t, "GetApproval", got, row)
			e.consistent()
		}},
		{"claims wait while the approval is requested, and write nothing", func(t *testing.T, e *env) {
			row := e.awaiting()
			before := len(e.pending())
			for _, d := range []time.Duration{time.Second, lease + time.Minute, approvalTTL - time.Second} {
				res := e.claim(baseRequest(gated()), at(d))
				if res.Decision != ledger.DecisionWait || res.Row.Attempt != 0 {
					t.Fatalf("claim at +%s: %s attempt %d, want wait at attempt 0", d, res.Decision, res.Row.Attempt)
				}
			}
			// An ungated claim of the same intent waits too: the row keeps its gate.
			if res := e.claim(baseRequest(), at(time.Minute)); res.Decision != ledger.DecisionWait {
				t.Fatalf("ungated claim of an awaiting row: %s", res.Decision)
			}
			if got := len(e.pending()); got != before {
				t.Fatalf("outbox: %d records, want %d", got, before)
			}
			sameRow(t, "row after waits", e.get(tenantA, row.Key), row)
		}},
		{"a grant lets the next claim proceed once", func(t *testing.T, e *env) {
			row := e.awaiting()
			granted, ch := e.decide(grant(row.Approval.ID, time.Minute))
			a := granted.Approval
			if a.State != ledger.ApprovalGranted || a.Actor != "alice@example.com" || a.Note != "looks right" || a.DecidedBy != approver ||
				!a.DecidedAt.Equal(at(time.Minute)) || granted.Status != ledger.StatusPending || granted.Attempt != 0 || ch.Changed || ch.Event == nil {
				t.Fatalf("granted: %+v row %s attempt %d change %+v", a, granted.Status, granted.Attempt, ch)
			}
			if id, _ := e.lastEvent(); id != tenantA+":"+row.Key+":"+ledger.EventApproved {
				t.Fatalf("outbox: %s, want the approved event", id)
			}
			res := e.claim(baseRequest(gated()), at(2*time.Minute))
			if res.Decision != ledger.DecisionProceed || res.Inserted || res.Row.Attempt != 1 || !res.Row.PendingUntil.Equal(at(2*time.Minute+lease)) {
				t.Fatalf("claim after the grant: %s inserted=%v attempt %d pending_until %v", res.Decision, res.Inserted, res.Row.Attempt, res.Row.PendingUntil)
			}
			if res := e.claim(baseRequest(gated()), at(3*time.Minute)); res.Decision != ledger.DecisionWait || res.Row.Attempt != 1 {
				t.Fatalf("second claim: %s attempt %d, want wait", res.Decision, res.Row.Attempt)
			}
			// From here the row is an ordinary row: a timeout, then a retry.
			e.report(tenantA, row.Key, timeout(4*time.Minute))
			if res := e.claim(baseRequest(gated()), at(5*time.Minute)); res.Decision != ledger.DecisionRetrySameKey || res.Row.Attempt != 2 {
				t.Fatalf("claim after a timeout: %s attempt %d, want retry_same_key", res.Decision, res.Row.Attempt)
			}
			e.consistent()
		}},
		{"a grant of a frozen tool waits until the thaw", func(t *testing.T, e *env) {
			row := e.awaiting()
			e.decide(grant(row.Approval.ID, time.Minute))
			if res := e.claim(baseRequest(gated(), frozen()), at(2*time.Minute)); res.Decision != ledger.DecisionWait || res.Row.Attempt != 0 {
				t.Fatalf("frozen claim after a grant: %s", res.Decision)
			}
			if res := e.claim(baseRequest(gated()), at(3*time.Minute)); res.Decision != ledger.DecisionProceed {
				t.Fatalf("claim after the thaw: %s", res.Decision)
			}
		}},
		{"the kill switch wins over the gate for a new key", func(t *testing.T, e *env) {
			res := e.claim(baseRequest(gated(), frozen()), t0)
			if res.Decision != ledger.DecisionStop || res.Code != ledger.CodeToolFrozen || res.Inserted {
				t.Fatalf("frozen gated claim: %s/%s inserted=%v", res.Decision, res.Code, res.Inserted)
			}
			e.mustNotExist(tenantA, newClaim(t, baseRequest(), t0).Row.Key)
			if got := e.approvals(ledger.ApprovalQuery{}); len(got) != 0 {
				t.Fatalf("approvals: %d, want none", len(got))
			}
		}},
		{"a denial fails the row; claims stop with approval_denied", func(t *testing.T, e *env) {
			row := e.awaiting()
			denied, ch := e.decide(deny(row.Approval.ID, time.Minute))
			if denied.Status != ledger.StatusFailedPoison || denied.Approval.State != ledger.ApprovalDenied || !ch.Changed || ch.To != ledger.StatusFailedPoison ||
				denied.Resolution == nil || denied.Resolution.Source != ledger.SourceHuman || denied.Resolution.Actor != "bob@example.com" ||
				denied.Resolution.Note != "wrong customer" || !denied.NextCheckAt.IsZero() {
				t.Fatalf("denied: %+v resolution %+v", denied, denied.Resolution)
			}
			if id, ev := e.lastEvent(); id != tenantA+":"+row.Key+":"+ledger.EventDenied || ev.Source != ledger.SourceHuman || ev.Approval.State != ledger.ApprovalDenied {
				t.Fatalf("outbox: %s %+v", id, ev)
			}
			res := e.claim(baseRequest(gated()), at(2*time.Minute))
			if res.Decision != ledger.DecisionStop || res.Code != ledger.CodeApprovalDenied {
				t.Fatalf("claim after denial: %s/%s", res.Decision, res.Code)
			}
			due, err := e.s.Due(e.ctx, at(1000*time.Hour), 10)
			if err != nil || len(due) != 0 {
				t.Fatalf("Due after a denial: %d rows, %v; want none", len(due), err)
			}
			e.consistent()
		}},
		{"an expiry fails the row once its time is up; claims stop with approval_expired", func(t *testing.T, e *env) {
			row := e.awaiting()
			id := row.Approval.ID
			if got, ch := e.decide(expiry(id, approvalTTL-time.Second)); got.Approval.State != ledger.ApprovalRequested || ch.Event != nil {
				t.Fatalf("expiry before its time: %+v", got.Approval)
			}
			before := len(e.pending())
			expired, ch := e.decide(expiry(id, approvalTTL))
			if expired.Status != ledger.StatusFailedPoison || expired.Approval.State != ledger.ApprovalExpired || expired.Approval.Actor != ledger.ExpiryActor ||
				expired.Resolution.Source != ledger.SourceHuman || !ch.Changed {
				t.Fatalf("expired: %+v %+v", expired.Approval, expired.Resolution)
			}
			if got := len(e.pending()); got != before+1 {
				t.Fatalf("outbox: %d records, want %d", got, before+1)
			}
			if mid, _ := e.lastEvent(); mid != tenantA+":"+row.Key+":"+ledger.EventApprovalExpired {
				t.Fatalf("outbox: %s, want approval_expired", mid)
			}
			// The expiry job and a human may race: a second expiry is a no-op.
			again, ch := e.decide(expiry(id, approvalTTL+time.Minute))
			sameRow(t, "after a second expiry", again, expired)
			if ch.Event != nil || len(e.pending()) != before+1 {
				t.Fatal("a second expiry wrote an outbox record")
			}
			if res := e.claim(baseRequest(gated()), at(approvalTTL+2*time.Minute)); res.Decision != ledger.DecisionStop || res.Code != ledger.CodeApprovalExpired {
				t.Fatalf("claim after expiry: %s/%s", res.Decision, res.Code)
			}
			e.consistent()
		}},
		{"a claim after expires_at expires the request itself", func(t *testing.T, e *env) {
			row := e.awaiting()
			res := e.claim(baseRequest(gated()), at(approvalTTL))
			if res.Decision != ledger.DecisionStop || res.Code != ledger.CodeApprovalExpired || res.Row.Status != ledger.StatusFailedPoison {
				t.Fatalf("claim at expires_at: %s/%s %s", res.Decision, res.Code, res.Row.Status)
			}
			sameRow(t, "stored", e.get(tenantA, row.Key), res.Row)
			if mid, _ := e.lastEvent(); mid != tenantA+":"+row.Key+":"+ledger.EventApprovalExpired {
				t.Fatalf("outbox: %s, want approval_expired", mid)
			}
			if got := e.approvals(ledger.ApprovalQuery{}); len(got) != 0 {
				t.Fatalf("an expired approval is still listed: %v", approvalIDs(got))
			}
			e.consistent()
		}},
		{"decisions that are refused change nothing", func(t *testing.T, e *env) {
			row := e.awaiting()
			id := row.Approval.ID
			before := len(e.pending())
			self := grant(id, time.Minute)
			self.By = claimant
			other := grant(id, time.Minute)
			other.Tenant = tenantB
			unknown := grant(ledger.ApprovalID(tenantA, "no-such-key"), time.Minute)
			late := grant(id, approvalTTL)
			noActor := grant(id, time.Minute)
			noActor.Actor = ""
			noNote := deny(id, time.Minute)
			noNote.Note = " "
			badID := grant("ap_123", time.Minute)
			for _, c := range []struct {
				name string
				d    ledger.ApprovalDecision
				want error
			}{
				{"by the claim's token", self, ledger.ErrSelfApproval},
				{"of another tenant", other, ledger.ErrApprovalNotFound},
				{"of no approval", unknown, ledger.ErrApprovalNotFound},
				{"at expires_at", late, ledger.ErrApprovalExpired},
				{"without an actor", noActor, ledger.ErrInvalid},
				{"a denial without a note", noNote, ledger.ErrInvalid},
				{"with a bad id", badID, ledger.ErrInvalid},
			} {
				if _, _, err := e.s.DecideApproval(e.ctx, c.d); !errors.Is(err, c.want) {
					t.Errorf("a decision %s: got %v, want %v", c.name, err, c.want)
				}
			}
			if _, _, err := e.s.DecideApproval(e.ctx, other); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("ErrApprovalNotFound does not match ErrNotFound: %v", err)
			}
			sameRow(t, "row after refused decisions", e.get(tenantA, row.Key), row)
			if got := len(e.pending()); got != before {
				t.Fatalf("outbox: %d records, want %d", got, before)
			}
			// A decided approval cannot be decided again.
			e.decide(grant(id, time.Minute))
			for _, d := range []ledger.ApprovalDecision{grant(id, 2*time.Minute), deny(id, 2*time.Minute)} {
				if _, _, err := e.s.DecideApproval(e.ctx, d); !errors.Is(err, ledger.ErrApprovalDecided) {
					t.Errorf("%s of a granted approval: got %v, want ErrApprovalDecided", d.Verdict, err)
				}
			}
			if _, err := e.s.GetApproval(e.ctx, "ap_x"); !errors.Is(err, ledger.ErrInvalid) {
				t.Errorf("GetApproval of a bad id: %v", err)
			}
			if _, err := e.s.GetApproval(e.ctx, unknown.ID); !errors.Is(err, ledger.ErrApprovalNotFound) {
				t.Errorf("GetApproval of no approval: %v", err)
			}
		}},
		{"a runtime's report on a row awaiting approval is refused; the request stays open and decidable", func(t *testing.T, e *env) {
			row := e.awaiting()
			before := len(e.pending())
			for _, o := range []ledger.Outcome{timeout(time.Minute), {Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_x", At: at(time.Minute)}} {
				// A call it was told not to make: no attempt to report.
				if _, _, err := e.s.Report(e.ctx, tenantA, row.Key, o); !errors.Is(err, ledger.ErrInvalidTransition) {
					t.Fatalf("Report(%s) on an awaiting row: %v, want ErrInvalidTransition", o.Kind, err)
				}
			}
			if got := e.get(tenantA, row.Key); got.Status != ledger.StatusPending || got.Attempt != 0 || got.Approval.State != ledger.ApprovalRequested {
				t.Fatalf("row after refused reports: %s attempt %d approval %s", got.Status, got.Attempt, got.Approval.State)
			}
			if got := len(e.pending()); got != before {
				t.Fatalf("outbox: %d records, want %d", got, before)
			}
			if got := e.approvals(ledger.ApprovalQuery{}); len(got) != 1 {
				t.Fatalf("open approvals = %v, want the request still listed", approvalIDs(got))
			}
			closed, ch := e.decide(expiry(row.Approval.ID, approvalTTL))
			if closed.Status != ledger.StatusFailedPoison || closed.Approval.State != ledger.ApprovalExpired || !ch.Changed {
				t.Fatalf("expiry: %s %+v %+v", closed.Status, closed.Approval, ch)
			}
			e.consistent()
		}},
		{"open approvals are listed by expiry, per tenant or all, a page at a time", func(t *testing.T, e *env) {
			// Five requests across two tenants; their TTLs put them out of claim order.
			var want []string
			ttls := []time.Duration{5 * time.Hour, time.Hour, 3 * time.Hour, 2 * time.Hour, 4 * time.Hour}
			tenants := []string{tenantA, tenantB, tenantA, tenantA, tenantB}
			for i, ttl := range ttls {
				req := baseRequest(gated(), withTenant(tenants[i]), withRunID(fmt.Sprintf("run-%d", i)))
				req.Gate.ApprovalTTL = ttl
				e.claim(req, t0)
			}
			rows := e.approvals(ledger.ApprovalQuery{Limit: 2})
			for _, r := range rows {
				want = append(want, r.Tenant+"@"+r.Approval.ExpiresAt.Sub(t0).String())
			}
			if got := fmt.Sprint(want); got != "[globex@1h0m0s acme@2h0m0s acme@3h0m0s globex@4h0m0s acme@5h0m0s]" {
				t.Fatalf("ListApprovals, all tenants, 2 a page: %s", got)
			}
			acme := e.approvals(ledger.ApprovalQuery{Tenant: tenantA, Limit: 1})
			if len(acme) != 3 || !slices.IsSortedFunc(acme, ledger.CompareApprovals) {
				t.Fatalf("ListApprovals acme: %v", approvalIDs(acme))
			}
			for _, r := range acme {
				if r.Tenant != tenantA {
					t.Fatalf("acme's list holds %s", r.Tenant)
				}
			}
			due := e.approvals(ledger.ApprovalQuery{DueBy: at(3 * time.Hour)})
			if len(due) != 3 {
				t.Fatalf("ListApprovals due by +3h: %d rows, want 3", len(due))
			}
			// A decided approval leaves the list.
			e.decide(grant(due[0].Approval.ID, time.Minute))
			e.decide(deny(due[1].Approval.ID, time.Minute))
			if got := e.approvals(ledger.ApprovalQuery{}); len(got) != 3 {
				t.Fatalf("after two decisions: %d open approvals, want 3", len(got))
			}
			page, err := e.s.ListApprovals(e.ctx, ledger.ApprovalQuery{Tenant: tenantA, Limit: 1})
			if err != nil || page.NextCursor == "" {
				t.Fatalf("first page: %v %q", err, page.NextCursor)
			}
			for _, q := range []ledger.ApprovalQuery{
				{Tenant: tenantB, Cursor: page.NextCursor}, // another tenant's cursor
				{Cursor: page.NextCursor},                  // a tenant's cursor for the whole list
				{Cursor: "not-a-cursor"},
				{Limit: ledger.MaxListLimit + 1},
				{Tenant: "ac me"},
			} {
				if _, err := e.s.ListApprovals(e.ctx, q); !errors.Is(err, ledger.ErrInvalid) {
					t.Errorf("ListApprovals(%+v): got %v, want ErrInvalid", q, err)
				}
			}
			e.consistent()
		}},
		{"concurrent claims after a grant: exactly one proceeds", func(t *testing.T, e *env) {
			row := e.awaiting()
			e.decide(grant(row.Approval.ID, time.Minute))
			const n = 16
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				proceeds int
			)
			for range n {
				wg.Go(func() {
					res, err := e.s.Claim(e.ctx, newClaim(t, baseRequest(gated()), at(2*time.Minute)))
					if err != nil {
						t.Errorf("Claim: %v", err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					switch res.Decision {
					case ledger.DecisionProceed:
						proceeds++
					case ledger.DecisionWait:
					default:
						t.Errorf("claim: %s", res.Decision)
					}
				})
			}
			wg.Wait()
			if proceeds != 1 {
				t.Fatalf("%d claims proceeded, want exactly 1", proceeds)
			}
			if got := e.get(tenantA, row.Key); got.Attempt != 1 {
				t.Fatalf("attempt %d, want 1", got.Attempt)
			}
		}},
		{"a closed store is unavailable", func(t *testing.T, e *env) {
			row := e.awaiting()
			if err := e.s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.s.DecideApproval(e.ctx, grant(row.Approval.ID, time.Minute)); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("DecideApproval after Close: %v", err)
			}
			if _, err := e.s.GetApproval(e.ctx, row.Approval.ID); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("GetApproval after Close: %v", err)
			}
			if _, err := e.s.ListApprovals(e.ctx, ledger.ApprovalQuery{}); !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("ListApprovals after Close: %v", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t, open)) })
	}
}
