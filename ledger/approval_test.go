package ledger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

const ttl = time.Hour

// gatedClaim is validClaimRequest sent to approval, made at now.
func gatedClaim(t *testing.T, now time.Time, frozen bool) ledger.Claim {
	t.Helper()
	req := validClaimRequest()
	req.Frozen = frozen
	req.Gate = ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "checklist not complete", ApprovalTTL: ttl, RequestedBy: "tok_a"}
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitingRow is the row a gated claim at t0 inserts.
func awaitingRow(t *testing.T) ledger.Row {
	t.Helper()
	res, row, err := ledger.DecideClaim(nil, gatedClaim(t, t0, false), ledger.DefaultPolicy())
	if err != nil || row == nil || res.Decision != ledger.DecisionAwaitApproval {
		t.Fatalf("gated new key: %s %v", res.Decision, err)
	}
	return *row
}

func decision(v ledger.Verdict, row ledger.Row, at time.Time) ledger.ApprovalDecision {
	return ledger.ApprovalDecision{ID: row.Approval.ID, Verdict: v, Actor: "alice", Note: "because", By: "tok_b", At: at}
}

func TestGatedNewKey(t *testing.T) {
	p := ledger.DefaultPolicy()
	res, row, err := ledger.DecideClaim(nil, gatedClaim(t, t0, false), p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != ledger.DecisionAwaitApproval || !res.Inserted || row.Attempt != 0 || row.Status != ledger.StatusPending ||
		row.Autonomy != ledger.AutonomyApproval || !row.PendingUntil.IsZero() || !row.NextCheckAt.Equal(t0.Add(ttl)) {
		t.Fatalf("await_approval row: %+v", row)
	}
	a := row.Approval
	if a.ID != ledger.ApprovalID("acme", row.Key) || a.State != ledger.ApprovalRequested || !a.ExpiresAt.Equal(t0.Add(ttl)) || a.RequestedBy != "tok_a" {
		t.Fatalf("approval: %+v", a)
	}
	if len(res.Events) != 1 || res.Events[0].Status != ledger.EventApprovalRequested || res.Events[0].Approval.ID != a.ID {
		t.Fatalf("events: %+v", res.Events)
	}
	// The kill switch wins: nothing is inserted, nothing is asked.
	res, row, err = ledger.DecideClaim(nil, gatedClaim(t, t0, true), p)
	if err != nil || row != nil || res.Decision != ledger.DecisionStop || res.Code != ledger.CodeToolFrozen || len(res.Events) != 0 {
		t.Fatalf("frozen gated key: %s/%s row %v events %d", res.Decision, res.Code, row, len(res.Events))
	}
	// The default TTL.
	c := gatedClaim(t, t0, false)
	c.Gate.ApprovalTTL = 0
	_, row, _ = ledger.DecideClaim(nil, c, p)
	if !row.Approval.ExpiresAt.Equal(t0.Add(ledger.DefaultApprovalTTL)) {
		t.Fatalf("default ttl: expires %v", row.Approval.ExpiresAt)
	}
}

func TestGateValidate(t *testing.T) {
	for _, g := range []ledger.Gate{
		{Autonomy: "maybe", Reason: "r"},
		{Autonomy: ledger.AutonomyApproval},
		{Autonomy: ledger.AutonomyApproval, Reason: strings.Repeat("r", ledger.MaxNoteLen+1)},
		{Autonomy: ledger.AutonomyApproval, Reason: "r", ApprovalTTL: -time.Second},
		{Autonomy: ledger.AutonomyApproval, Reason: "r", RequestedBy: "a b"},
	} {
		req := validClaimRequest()
		req.Gate = g
		if _, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("NewClaim with gate %+v: got %v, want ErrInvalid", g, err)
		}
	}
}

func TestDecideClaimOnGatedRows(t *testing.T) {
	p := ledger.DefaultPolicy()
	granted := func() ledger.Row {
		r := awaitingRow(t)
		if _, err := ledger.DecideApproval(&r, decision(ledger.VerdictGrant, r, t0.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		return r
	}
	denied := func() ledger.Row {
		r := awaitingRow(t)
		if _, err := ledger.DecideApproval(&r, decision(ledger.VerdictDeny, r, t0.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		return r
	}
	expired := func() ledger.Row {
		r := awaitingRow(t)
		if _, err := ledger.DecideApproval(&r, decision(ledger.VerdictExpire, r, t0.Add(ttl))); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A runtime's report on an ungranted row is refused (and leaves the
	// row as it was); a row stored unknown at attempt 0 by an older
	// version is still never retried.
	reported := func() ledger.Row {
		r := awaitingRow(t)
		before := r.Clone()
		if _, err := ledger.Apply(&r, ledger.Classify(ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0.Add(time.Minute)}), p); !errors.Is(err, ledger.ErrInvalidTransition) || r.Status != before.Status {
			t.Fatalf("report on an awaiting row: %v, row %s; want ErrInvalidTransition, row unchanged", err, r.Status)
		}
		r.Status = ledger.StatusUnknown
		return r
	}
	tests := []struct {
		name      string
		row       ledger.Row
		now       time.Time
		frozen    bool
		want      ledger.Decision
		wantCode  string
		attempt   int
		writes    bool
		wantEvent string
	}{
		{name: "requested waits", row: awaitingRow(t), now: t0.Add(time.Minute), want: ledger.DecisionWait},
		{name: "requested waits past any lease", row: awaitingRow(t), now: t0.Add(ttl - time.Nanosecond), want: ledger.DecisionWait},
		{name: "requested at expires_at expires", row: awaitingRow(t), now: t0.Add(ttl), want: ledger.DecisionStop, wantCode: ledger.CodeApprovalExpired, writes: true, wantEvent: ledger.EventApprovalExpired},
		{name: "requested and frozen at expires_at expires too", row: awaitingRow(t), now: t0.Add(2 * ttl), frozen: true, want: ledger.DecisionStop, wantCode: ledger.CodeApprovalExpired, writes: true, wantEvent: ledger.EventApprovalExpired},
		{name: "granted proceeds, attempt 1", row: granted(), now: t0.Add(2 * time.Minute), want: ledger.DecisionProceed, attempt: 1, writes: true},
		{name: "granted proceeds after its expiry time too", row: granted(), now: t0.Add(3 * ttl), want: ledger.DecisionProceed, attempt: 1, writes: true},
		{name: "granted and frozen waits", row: granted(), now: t0.Add(2 * time.Minute), frozen: true, want: ledger.DecisionWait},
		{name: "denied stops approval_denied", row: denied(), now: t0.Add(2 * time.Minute), want: ledger.DecisionStop, wantCode: ledger.CodeApprovalDenied},
		{name: "expired stops approval_expired", row: expired(), now: t0.Add(2 * ttl), want: ledger.DecisionStop, wantCode: ledger.CodeApprovalExpired},
		{name: "an attempt-0 row that went unknown is never retried", row: reported(), now: t0.Add(time.Hour), want: ledger.DecisionWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := gatedClaim(t, tt.now, tt.frozen)
			before := tt.row.Clone()
			res, write, err := ledger.DecideClaim(&tt.row, c, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Decision != tt.want || res.Code != tt.wantCode || res.Inserted {
				t.Fatalf("decision: got %s/%s inserted=%v, want %s/%s", res.Decision, res.Code, res.Inserted, tt.want, tt.wantCode)
			}
			if (write != nil) != tt.writes {
				t.Fatalf("write: got %v, want %v", write != nil, tt.writes)
			}
			if write != nil && write.Attempt != tt.attempt && tt.attempt != 0 {
				t.Fatalf("attempt: got %d, want %d", write.Attempt, tt.attempt)
			}
			if tt.want == ledger.DecisionProceed && (!write.PendingUntil.Equal(tt.now.Add(p.PendingTTL)) || res.Row.Attempt != 1) {
				t.Fatalf("proceed without its lease: %+v", write)
			}
			gotEvent := ""
			if len(res.Events) == 1 {
				gotEvent = res.Events[0].Status
			}
			if gotEvent != tt.wantEvent || len(res.Events) > 1 {
				t.Fatalf("events: %+v, want %q", res.Events, tt.wantEvent)
			}
			if tt.row.Approval.State != before.Approval.State || tt.row.Attempt != before.Attempt {
				t.Fatal("DecideClaim changed the existing row in place")
			}
		})
	}
}

func TestDecideApproval(t *testing.T) {
	minute := t0.Add(time.Minute)
	tests := []struct {
		name       string
		row        func() ledger.Row
		d          func(ledger.Row) ledger.ApprovalDecision
		wantErr    error
		wantState  ledger.ApprovalState
		wantStatus ledger.Status
		wantEvent  string
	}{
		{name: "grant", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictGrant, r, minute) },
			wantState: ledger.ApprovalGranted, wantStatus: ledger.StatusPending, wantEvent: ledger.EventApproved},
		{name: "deny", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictDeny, r, minute) },
			wantState: ledger.ApprovalDenied, wantStatus: ledger.StatusFailedPoison, wantEvent: ledger.EventDenied},
		{name: "expire before its time changes nothing", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictExpire, r, minute) },
			wantState: ledger.ApprovalRequested, wantStatus: ledger.StatusPending},
		{name: "expire at its time", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictExpire, r, t0.Add(ttl)) },
			wantState: ledger.ApprovalExpired, wantStatus: ledger.StatusFailedPoison, wantEvent: ledger.EventApprovalExpired},
		{name: "grant at expires_at is too late", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictGrant, r, t0.Add(ttl)) },
			wantErr: ledger.ErrApprovalExpired},
		{name: "deny at expires_at is too late", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictDeny, r, t0.Add(ttl)) },
			wantErr: ledger.ErrApprovalExpired},
		{name: "the claim's own token", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictGrant, r, minute)
			d.By = "tok_a"
			return d
		}, wantErr: ledger.ErrSelfApproval},
		{name: "another tenant", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictGrant, r, minute)
			d.Tenant = "globex"
			return d
		}, wantErr: ledger.ErrApprovalNotFound},
		{name: "the right tenant", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictGrant, r, minute)
			d.Tenant = "acme"
			return d
		}, wantState: ledger.ApprovalGranted, wantStatus: ledger.StatusPending, wantEvent: ledger.EventApproved},
		{name: "another id", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictGrant, r, minute)
			d.ID = ledger.ApprovalID("acme", "other")
			return d
		}, wantErr: ledger.ErrApprovalNotFound},
		{name: "a row without approval", row: func() ledger.Row { return claimAt(t, t0, ledger.ClassWriteIdempotent, false).Row },
			d: func(r ledger.Row) ledger.ApprovalDecision {
				return ledger.ApprovalDecision{ID: ledger.ApprovalID("acme", r.Key), Verdict: ledger.VerdictGrant, Actor: "a", At: minute}
			}, wantErr: ledger.ErrApprovalNotFound},
		{name: "granted twice", row: func() ledger.Row {
			r := awaitingRow(t)
			_, _ = ledger.DecideApproval(&r, decision(ledger.VerdictGrant, r, minute))
			return r
		}, d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictDeny, r, minute) }, wantErr: ledger.ErrApprovalDecided},
		{name: "expiry of a granted approval is a no-op", row: func() ledger.Row {
			r := awaitingRow(t)
			_, _ = ledger.DecideApproval(&r, decision(ledger.VerdictGrant, r, minute))
			return r
		}, d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictExpire, r, t0.Add(2*ttl)) },
			wantState: ledger.ApprovalGranted, wantStatus: ledger.StatusPending},
		{name: "no actor", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictGrant, r, minute)
			d.Actor = ""
			return d
		}, wantErr: ledger.ErrInvalidApproval},
		{name: "an actor with a newline", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictGrant, r, minute)
			d.Actor = "eve\nadmin"
			return d
		}, wantErr: ledger.ErrInvalidApproval},
		{name: "a denial says why", d: func(r ledger.Row) ledger.ApprovalDecision {
			d := decision(ledger.VerdictDeny, r, minute)
			d.Note = ""
			return d
		}, wantErr: ledger.ErrInvalidApproval},
		{name: "an unknown verdict", d: func(r ledger.Row) ledger.ApprovalDecision { return decision("maybe", r, minute) }, wantErr: ledger.ErrInvalidApproval},
		{name: "no time", d: func(r ledger.Row) ledger.ApprovalDecision { return decision(ledger.VerdictGrant, r, time.Time{}) }, wantErr: ledger.ErrInvalidApproval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := awaitingRow(t)
			if tt.row != nil {
				row = tt.row()
			}
			before := row.Clone()
			ch, err := ledger.DecideApproval(&row, tt.d(before))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				if row.Status != before.Status || row.Approval != nil && row.Approval.State != before.Approval.State {
					t.Fatal("a refused decision changed the row")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if row.Approval.State != tt.wantState || row.Status != tt.wantStatus {
				t.Fatalf("got %s/%s, want %s/%s", row.Approval.State, row.Status, tt.wantState, tt.wantStatus)
			}
			gotEvent := ""
			if ch.Event != nil {
				gotEvent = ch.Event.Status
				if ch.Event.Approval == nil || ch.Event.Approval.State != row.Approval.State || ch.Event.Source != ledger.SourceHuman {
					t.Fatalf("event: %+v", ch.Event)
				}
			}
			if gotEvent != tt.wantEvent || ch.Changed != (tt.wantStatus != before.Status) {
				t.Fatalf("change: event %q changed=%v, want %q", gotEvent, ch.Changed, tt.wantEvent)
			}
			if tt.wantStatus == ledger.StatusFailedPoison && (row.Resolution == nil || row.Resolution.Source != ledger.SourceHuman || !row.NextCheckAt.IsZero()) {
				t.Fatalf("a gate-closed row: resolution %+v next_check_at %v", row.Resolution, row.NextCheckAt)
			}
		})
	}
}

func TestApprovalID(t *testing.T) {
	a, b := ledger.ApprovalID("acme", "cart-1"), ledger.ApprovalID("globex", "cart-1")
	if a == b || ledger.ValidateApprovalID(a) != nil || ledger.ApprovalID("acme", "cart-1") != a {
		t.Fatalf("ApprovalID: %s %s", a, b)
	}
	for _, bad := range []string{"", "ap_", "ap_" + strings.Repeat("A", 32), "xx_" + strings.Repeat("a", 32), a + "0"} {
		if !errors.Is(ledger.ValidateApprovalID(bad), ledger.ErrInvalid) {
			t.Errorf("ValidateApprovalID(%q) accepted it", bad)
		}
	}
}

func TestApprovalCursor(t *testing.T) {
	r := awaitingRow(t)
	c := ledger.EncodeApprovalCursor("acme", r)
	at, tenant, key, err := ledger.DecodeApprovalCursor("acme", c)
	if err != nil || !at.Equal(r.Approval.ExpiresAt) || tenant != "acme" || key != r.Key {
		t.Fatalf("round trip: %v %s %s %v", at, tenant, key, err)
	}
	for _, scope := range []string{"", "globex"} {
		if _, _, _, err := ledger.DecodeApprovalCursor(scope, c); !errors.Is(err, ledger.ErrInvalidListQuery) {
			t.Errorf("decoded for %q: %v", scope, err)
		}
	}
	// A row list cursor is not an approval cursor.
	if _, _, _, err := ledger.DecodeApprovalCursor("acme", ledger.EncodeListCursor("acme", t0, "k")); !errors.Is(err, ledger.ErrInvalidListQuery) {
		t.Errorf("a list cursor decoded as an approval cursor: %v", err)
	}
}
