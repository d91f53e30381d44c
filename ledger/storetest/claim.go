package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// seed returns a setup that claims the default intent at t0 (with mods) and
// then reports outcomes, so the row reaches the state a case needs.
func seed(mods []reqMod, outcomes ...ledger.Outcome) func(e *env) ledger.Row {
	return func(e *env) ledger.Row {
		e.t.Helper()
		res := e.claim(baseRequest(mods...), t0)
		for _, o := range outcomes {
			e.report(res.Row.Tenant, res.Row.Key, o)
		}
		return e.get(res.Row.Tenant, res.Row.Key)
	}
}

func mods(m ...reqMod) []reqMod { return m }

func testClaimDecisions(t *testing.T, open Open) {
	lease := ledger.DefaultPolicy().PendingTTL
	bizKey := withKey("order-1001")
	cases := []struct {
		name  string
		setup func(e *env) ledger.Row // nil: no row
		claim []reqMod
		after time.Duration // claim time, from t0
		// want
		err      error
		decision ledger.Decision
		code     string
		inserted bool
		status   ledger.Status
		attempt  int
		receipt  string
	}{
		{name: "none proceeds and inserts pending attempt 1",
			decision: ledger.DecisionProceed, inserted: true, status: ledger.StatusPending, attempt: 1},
		{name: "none with a business key proceeds",
			claim: mods(bizKey), decision: ledger.DecisionProceed, inserted: true, status: ledger.StatusPending, attempt: 1},
		{name: "frozen with no row stops tool_frozen and inserts nothing",
			claim: mods(frozen()), decision: ledger.DecisionStop, code: ledger.CodeToolFrozen},
		{name: "frozen pending past lease waits instead of retrying",
			setup: seed(nil), claim: mods(frozen()), after: lease + time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 1},
		{name: "frozen unknown waits instead of retrying",
			setup: seed(nil, timeout(time.Second)), claim: mods(frozen()), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "frozen succeeded replays as usual",
			setup: seed(nil, response(200, "pi_1", time.Second)), claim: mods(frozen()), after: time.Minute,
			decision: ledger.DecisionReplay, status: ledger.StatusSucceeded, attempt: 1, receipt: "pi_1"},
		{name: "frozen failed_poison stops",
			setup: seed(nil, response(402, "", time.Second)), claim: mods(frozen()), after: time.Minute,
			decision: ledger.DecisionStop, code: ledger.CodeFailedPoison, status: ledger.StatusFailedPoison, attempt: 1},
		{name: "business key with a different intent is refused",
			setup: seed(mods(bizKey)), claim: mods(bizKey, withIntent(`{"amount":999,"currency":"usd","customer":"cus_1"}`)),
			after: time.Minute, err: ledger.ErrFingerprintMismatch},
		{name: "business key with a different intent is refused even when succeeded",
			setup: seed(mods(bizKey), response(200, "pi_1", time.Second)), claim: mods(bizKey, withIntent(`{"amount":1}`)),
			after: time.Minute, err: ledger.ErrFingerprintMismatch},
		{name: "same intent, reordered and renumbered, is the same intent",
			setup: seed(mods(bizKey)), claim: mods(bizKey, withIntent(`{ "customer":"cus_1", "currency":"usd", "amount":1050.0 }`)),
			after: time.Minute, decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 1},
		{name: "succeeded replays with the stored receipt",
			setup: seed(nil, response(200, "pi_1", time.Second)), after: time.Minute,
			decision: ledger.DecisionReplay, status: ledger.StatusSucceeded, attempt: 1, receipt: "pi_1"},
		{name: "pending inside its lease waits",
			setup: seed(nil), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 1},
		{name: "pending one microsecond before the lease ends waits",
			setup: seed(nil), after: lease - time.Microsecond,
			decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 1},
		{name: "pending at the end of its lease retries with the same key",
			setup: seed(nil), after: lease,
			decision: ledger.DecisionRetrySameKey, status: ledger.StatusPending, attempt: 2},
		{name: "pending past its lease, idempotent, window open retries with the same key",
			setup: seed(nil), after: lease + time.Minute,
			decision: ledger.DecisionRetrySameKey, status: ledger.StatusPending, attempt: 2},
		{name: "pending after a 429 retries with the same key at once",
			setup: seed(nil, response(429, "", time.Second)), after: 2 * time.Second,
			decision: ledger.DecisionRetrySameKey, status: ledger.StatusPending, attempt: 2},
		{name: "pending past its lease, write_ledger waits",
			setup: seed(mods(withClass(ledger.ClassWriteLedger))), claim: mods(withClass(ledger.ClassWriteLedger)), after: lease + time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 1},
		{name: "pending past its lease, write_irreversible waits",
			setup: seed(mods(withClass(ledger.ClassWriteIrreversible))), claim: mods(withClass(ledger.ClassWriteIrreversible)), after: lease + time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 1},
		{name: "unknown after a timeout, idempotent, window open retries with the same key",
			setup: seed(nil, timeout(time.Second)), after: time.Minute,
			decision: ledger.DecisionRetrySameKey, status: ledger.StatusUnknown, attempt: 2},
		{name: "unknown after a network error retries with the same key",
			setup: seed(nil, networkError(time.Second)), after: time.Minute,
			decision: ledger.DecisionRetrySameKey, status: ledger.StatusUnknown, attempt: 2},
		{name: "unknown after a 503 waits (the vendor replays a stored 5xx)",
			setup: seed(nil, response(503, "", time.Second)), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "unknown after a 500 waits",
			setup: seed(nil, response(500, "", time.Second)), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "unknown, write_ledger waits",
			setup: seed(mods(withClass(ledger.ClassWriteLedger)), timeout(time.Second)), claim: mods(withClass(ledger.ClassWriteLedger)), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "unknown, write_irreversible waits",
			setup: seed(mods(withClass(ledger.ClassWriteIrreversible)), timeout(time.Second)), claim: mods(withClass(ledger.ClassWriteIrreversible)), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "unknown, replay window closed waits",
			setup: seed(nil, timeout(time.Second)), after: 24*time.Hour + time.Second,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "unknown, vendor without a replay window waits",
			setup: seed(mods(withWindow(0)), timeout(time.Second)), claim: mods(withWindow(0)), after: time.Minute,
			decision: ledger.DecisionWait, status: ledger.StatusUnknown, attempt: 1},
		{name: "failed_poison stops",
			setup: seed(nil, response(400, "", time.Second)), after: time.Minute,
			decision: ledger.DecisionStop, code: ledger.CodeFailedPoison, status: ledger.StatusFailedPoison, attempt: 1},
		{name: "a retried pending row waits inside its new lease",
			setup: func(e *env) ledger.Row {
				row := seed(nil)(e)
				if res := e.claim(baseRequest(), at(lease)); res.Decision != ledger.DecisionRetrySameKey {
					e.t.Fatalf("setup retry: got %s", res.Decision)
				}
				return e.get(row.Tenant, row.Key)
			},
			after: lease + time.Minute, decision: ledger.DecisionWait, status: ledger.StatusPending, attempt: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			var before *ledger.Row
			if tc.setup != nil {
				r := tc.setup(e)
				before = &r
			}
			outboxBefore := len(e.pending())
			now := at(tc.after)
			c := newClaim(t, baseRequest(tc.claim...), now)
			res, err := e.s.Claim(e.ctx, c)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Claim: got err %v, want %v", err, tc.err)
				}
				sameRow(t, "row after a refused claim", e.get(before.Tenant, before.Key), *before)
				return
			}
			if err != nil {
				t.Fatalf("Claim: %v", err)
			}
			if res.Decision != tc.decision || res.Code != tc.code || res.Inserted != tc.inserted {
				t.Fatalf("Claim: got decision %s code %q inserted %v, want %s %q %v", res.Decision, res.Code, res.Inserted, tc.decision, tc.code, tc.inserted)
			}
			if len(res.Changes) != 0 {
				t.Fatalf("Claim: got %d orphan changes, want none", len(res.Changes))
			}
			if got := len(e.pending()); got != outboxBefore {
				t.Fatalf("outbox: a claim wrote %d records, want none", got-outboxBefore)
			}
			if tc.status == "" { // frozen with no row
				if res.Row.Key != "" {
					t.Fatalf("Claim: got row %s, want the zero row", res.Row.Key)
				}
				e.mustNotExist(c.Row.Tenant, c.Row.Key)
				page, err := e.s.List(e.ctx, ledger.ListQuery{Tenant: c.Row.Tenant})
				if err != nil || len(page.Rows) != 0 {
					t.Fatalf("List after a frozen claim: got %d rows, err %v; want none", len(page.Rows), err)
				}
				if due, err := e.s.Due(e.ctx, at(1000*time.Hour), 10); err != nil || len(due) != 0 {
					t.Fatalf("Due after a frozen claim: got %d rows, err %v; want none", len(due), err)
				}
				return
			}
			row := res.Row
			if row.Key != c.Row.Key || row.Status != tc.status || row.Attempt != tc.attempt || row.UpstreamReceiptID != tc.receipt {
				t.Fatalf("Claim row: got key %s status %s attempt %d receipt %q, want %s %s %d %q",
					row.Key, row.Status, row.Attempt, row.UpstreamReceiptID, c.Row.Key, tc.status, tc.attempt, tc.receipt)
			}
			stored := e.get(c.Row.Tenant, c.Row.Key)
			sameRow(t, "stored row vs claim result", stored, row)
			switch {
			case tc.inserted:
				sameRow(t, "inserted row vs the claim's row", stored, c.Row)
			case tc.decision == ledger.DecisionRetrySameKey:
				// A retry extends the lease and the resolver's grace, nothing else.
				want := before.Clone()
				want.Attempt = before.Attempt + 1
				want.UpdatedAt = now
				want.PendingUntil = now.Add(ledger.DefaultPolicy().PendingTTL)
				want.NextCheckAt = now.Add(ledger.DefaultPolicy().Grace)
				sameRow(t, "retried row", stored, want)
			default:
				sameRow(t, "row after a claim that writes nothing", stored, *before)
			}
			e.consistent()
		})
	}
}

func testCompensation(t *testing.T, open Open) {
	p := ledger.DefaultPolicy()
	cases := []struct {
		name     string
		outcomes []ledger.Outcome // reported on the original after its claim
		noOrig   bool
		err      error
	}{
		{name: "original pending is refused", err: ledger.ErrCompensationPending},
		{name: "original unknown is refused", outcomes: []ledger.Outcome{timeout(time.Second)}, err: ledger.ErrCompensationPending},
		{name: "original failed_poison is refused", outcomes: []ledger.Outcome{response(400, "", time.Second)}, err: ledger.ErrCompensationFailed},
		{name: "missing original is not found", noOrig: true, err: ledger.ErrNotFound},
		{name: "original succeeded proceeds, and a second request returns the first row",
			outcomes: []ledger.Outcome{response(200, "pi_1", time.Second)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			orig := newClaim(t, baseRequest(), t0).Row
			if !tc.noOrig {
				e.claim(baseRequest(), t0)
				for _, o := range tc.outcomes {
					e.report(orig.Tenant, orig.Key, o)
				}
			}
			// The compensation is built from a succeeded snapshot, as if the
			// API read the row before a concurrent change: the store must
			// check the original again inside its transaction.
			snapshot := orig.Clone()
			snapshot.Status = ledger.StatusSucceeded
			comp, err := ledger.NewCompensation(snapshot, "refund", 24*time.Hour, false, p, at(time.Minute))
			if err != nil {
				t.Fatalf("NewCompensation: %v", err)
			}
			if comp.Row.Key != ledger.CompensationKey(orig.Key, "refund") {
				t.Fatalf("compensation key: got %s", comp.Row.Key)
			}
			res, err := e.s.Claim(e.ctx, comp)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Claim compensation: got %v, want %v", err, tc.err)
				}
				e.mustNotExist(comp.Row.Tenant, comp.Row.Key)
				return
			}
			if err != nil || res.Decision != ledger.DecisionProceed || !res.Inserted {
				t.Fatalf("Claim compensation: got %s inserted %v err %v, want proceed", res.Decision, res.Inserted, err)
			}
			if res.Row.CompensationOf != orig.Key || res.Row.CompensationAction != "refund" {
				t.Fatalf("compensation row: of %q action %q", res.Row.CompensationOf, res.Row.CompensationAction)
			}
			first := e.get(comp.Row.Tenant, comp.Row.Key)
			again, err := ledger.NewCompensation(e.get(orig.Tenant, orig.Key), "refund", 24*time.Hour, false, p, at(2*time.Minute))
			if err != nil {
				t.Fatalf("NewCompensation again: %v", err)
			}
			res2, err := e.s.Claim(e.ctx, again)
			if err != nil {
				t.Fatalf("second compensation: %v", err)
			}
			if res2.Inserted || res2.Decision != ledger.DecisionWait {
				t.Fatalf("second compensation: got %s inserted %v, want wait on the first row", res2.Decision, res2.Inserted)
			}
			sameRow(t, "second compensation's row", res2.Row, first)
			sameRow(t, "stored compensation row", e.get(comp.Row.Tenant, comp.Row.Key), first)
			e.consistent()
		})
	}
}

// testClaimContention: many runtimes that time out and retry at once must
// produce one vendor call, not one each.
func testClaimContention(t *testing.T, open Open) {
	const n = 64
	lease := ledger.DefaultPolicy().PendingTTL
	cases := []struct {
		name   string
		setup  bool          // a pending row exists before the race
		timed  bool          // and its attempt timed out (the row is unknown)
		after  time.Duration // when the racers claim
		winner ledger.Decision
		loser  ledger.Decision
	}{
		{name: "new intent: exactly one proceed", winner: ledger.DecisionProceed, loser: ledger.DecisionWait},
		{name: "pending past its lease: exactly one retry_same_key", setup: true, after: lease + time.Minute,
			winner: ledger.DecisionRetrySameKey, loser: ledger.DecisionWait},
		// The lease of a retry covers an unknown row too: one vendor call at a time.
		{name: "unknown row: exactly one retry_same_key", setup: true, timed: true, after: time.Minute,
			winner: ledger.DecisionRetrySameKey, loser: ledger.DecisionWait},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			if tc.setup {
				first := e.claim(baseRequest(), t0)
				if tc.timed {
					e.report(first.Row.Tenant, first.Row.Key, timeout(time.Second))
				}
			}
			c := newClaim(t, baseRequest(), at(tc.after))
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				results = make([]ledger.ClaimResult, n)
				errs    = make([]error, n)
			)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i], errs[i] = e.s.Claim(e.ctx, c)
				}()
			}
			close(start)
			wg.Wait()
			counts := map[ledger.Decision]int{}
			for i, res := range results {
				if errs[i] != nil {
					t.Fatalf("claim %d: %v", i, errs[i])
				}
				counts[res.Decision]++
				if res.Row.Key != c.Row.Key {
					t.Fatalf("claim %d: row key %s, want %s", i, res.Row.Key, c.Row.Key)
				}
			}
			if counts[tc.winner] != 1 || counts[tc.loser] != n-1 {
				t.Fatalf("decisions: got %v, want 1 %s and %d %s", counts, tc.winner, n-1, tc.loser)
			}
			row := e.get(c.Row.Tenant, c.Row.Key)
			wantAttempt := 1
			if tc.setup {
				wantAttempt = 2
			}
			if row.Attempt != wantAttempt {
				t.Fatalf("attempt: got %d, want %d", row.Attempt, wantAttempt)
			}
			e.consistent()
		})
	}
}

// testSharedBusinessKey: two tenants may use the same business key — even
// one shaped like a minted key — and compensate it, each under its own
// local id; neither learns of the other.
func testSharedBusinessKey(t *testing.T, open Open) {
	p := ledger.DefaultPolicy()
	e := newEnv(t, open)
	key := strings.Repeat("ab", 32)
	lids := map[string]bool{}
	for _, tenant := range []string{tenantA, tenantB} {
		res := e.claim(baseRequest(withKey(key), withTenant(tenant)), t0)
		if res.Decision != ledger.DecisionProceed || !res.Inserted {
			t.Fatalf("%s claims business key %s: %s inserted %v", tenant, key, res.Decision, res.Inserted)
		}
		lids[res.Row.MetadataLocalID] = true
		row, _ := e.report(tenant, key, response(200, "pi_"+tenant, time.Second))
		comp, err := ledger.NewCompensation(row, "refund", 24*time.Hour, false, p, at(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		cres, err := e.s.Claim(e.ctx, comp)
		if err != nil || cres.Decision != ledger.DecisionProceed || !cres.Inserted {
			t.Fatalf("%s compensates %s: %v %v", tenant, key, cres.Decision, err)
		}
		lids[cres.Row.MetadataLocalID] = true
	}
	if len(lids) != 4 {
		t.Fatalf("local ids of two tenants' rows and compensations: %d distinct, want 4", len(lids))
	}
	e.consistent()
}
