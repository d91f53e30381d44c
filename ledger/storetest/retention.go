package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// ackAll publishes (acknowledges) every outbox record, as a relay would.
func (e *env) ackAll() {
	e.t.Helper()
	recs, err := e.s.PendingEvents(e.ctx, 10000)
	if err != nil {
		e.t.Fatalf("PendingEvents: %v", err)
	}
	seqs := make([]uint64, len(recs))
	for i, r := range recs {
		seqs[i] = r.Seq
	}
	if err := e.s.AckEvents(e.ctx, seqs...); err != nil {
		e.t.Fatalf("AckEvents: %v", err)
	}
}

func (e *env) expired(cutoff time.Time, limit int) []ledger.Row {
	e.t.Helper()
	rows, err := e.s.ExpiredRows(e.ctx, cutoff, limit)
	if err != nil {
		e.t.Fatalf("ExpiredRows: %v", err)
	}
	return rows
}

func (e *env) deleteExpired(cutoff time.Time, rows []ledger.Row) int {
	e.t.Helper()
	n, err := e.s.DeleteExpired(e.ctx, cutoff, rows)
	if err != nil {
		e.t.Fatalf("DeleteExpired: %v", err)
	}
	return n
}

func sameKeys(t *testing.T, what string, got []ledger.Row, want ...ledger.Row) {
	t.Helper()
	g, w := keys(got), keys(want)
	if len(g) != len(w) {
		t.Fatalf("%s: keys %v, want %v", what, g, w)
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("%s: keys %v, want %v", what, g, w)
		}
	}
}

// testRetention: ledger.Retention deletes settled rows older than the
// cutoff, oldest first, with their index entries, and never a row that
// is open, held by an unpublished event or an open compensation, or
// changed since it was read.
func testRetention(t *testing.T, open Open) {
	t.Run("settled rows before the cutoff go, oldest first; the rest stay", func(t *testing.T) {
		e := newEnv(t, open)
		a := e.claim(baseRequest(withIntent(`{"n":1}`)), t0).Row
		b := e.claim(baseRequest(withIntent(`{"n":2}`)), t0).Row
		c := e.claim(baseRequest(withIntent(`{"n":3}`)), t0).Row
		d := e.claim(baseRequest(withIntent(`{"n":4}`)), t0).Row
		o := e.claim(baseRequest(withIntent(`{"n":5}`)), t0).Row
		e.report(tenantA, b.Key, response(400, "", 2*time.Second)) // failed_poison at +2s
		e.report(tenantA, a.Key, response(200, "pi_a", 3*time.Second))
		e.report(tenantA, c.Key, response(200, "pi_c", time.Second))
		e.report(tenantA, d.Key, response(200, "pi_d", time.Hour)) // settles after the cutoff
		e.report(tenantA, o.Key, timeout(time.Second))             // open
		e.ackAll()
		cutoff := at(10 * time.Minute)

		if at, err := e.s.OldestSettled(e.ctx); err != nil || !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("OldestSettled = %v, %v; want %v", at, err, t0.Add(time.Second))
		}
		sameKeys(t, "a batch of 2", e.expired(cutoff, 2), e.get(tenantA, c.Key), e.get(tenantA, b.Key))
		batch := e.expired(cutoff, 10)
		sameKeys(t, "every expired row", batch, e.get(tenantA, c.Key), e.get(tenantA, b.Key), e.get(tenantA, a.Key))
		if n := e.deleteExpired(cutoff, batch); n != 3 {
			t.Fatalf("DeleteExpired = %d, want 3", n)
		}
		for _, k := range []string{a.Key, b.Key, c.Key} {
			e.mustNotExist(tenantA, k)
		}
		e.get(tenantA, d.Key)
		e.get(tenantA, o.Key)
		if rows := e.expired(cutoff, 10); len(rows) != 0 {
			t.Fatalf("after the delete: %v still expired", keys(rows))
		}
		if n := e.deleteExpired(cutoff, batch); n != 0 {
			t.Fatalf("DeleteExpired again = %d, want 0", n)
		}
		counts, err := e.s.CountRows(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if counts[ledger.StatusSucceeded] != 1 || counts[ledger.StatusFailedPoison] != 0 || counts[ledger.StatusUnknown] != 1 {
			t.Fatalf("CountRows after retention: %v", counts)
		}
		if at, err := e.s.OldestSettled(e.ctx); err != nil || !at.Equal(t0.Add(time.Hour)) {
			t.Fatalf("OldestSettled = %v, %v; want %v", at, err, t0.Add(time.Hour))
		}
		page, err := e.s.List(e.ctx, ledger.ListQuery{Tenant: tenantA})
		if err != nil || len(page.Rows) != 2 {
			t.Fatalf("List after retention: %d rows, %v; want 2", len(page.Rows), err)
		}
		e.consistent()
		// A deleted key is forgotten: its next claim starts a new row.
		if res := e.claim(baseRequest(withIntent(`{"n":1}`)), at(time.Hour)); !res.Inserted || res.Decision != ledger.DecisionProceed {
			t.Fatalf("claim of a deleted key: %s inserted=%v, want proceed inserted", res.Decision, res.Inserted)
		}
		e.consistent()
	})

	t.Run("an unpublished event holds its row", func(t *testing.T) {
		e := newEnv(t, open)
		a := e.claim(baseRequest(), t0).Row
		e.report(tenantA, a.Key, response(200, "pi_a", time.Second))
		cutoff := at(time.Hour)
		if rows := e.expired(cutoff, 10); len(rows) != 0 {
			t.Fatalf("expired with its succeeded event unpublished: %v", keys(rows))
		}
		snapshot := e.get(tenantA, a.Key)
		if n := e.deleteExpired(cutoff, []ledger.Row{snapshot}); n != 0 {
			t.Fatalf("DeleteExpired with the event unpublished = %d, want 0", n)
		}
		e.ackAll()
		sameKeys(t, "once published", e.expired(cutoff, 10), snapshot)
	})

	t.Run("an open compensation holds its original", func(t *testing.T) {
		e := newEnv(t, open)
		orig := e.claim(baseRequest(), t0).Row
		orig, _ = e.report(tenantA, orig.Key, response(200, "pi_1", time.Second))
		comp, err := ledger.NewCompensation(orig, "refund", 24*time.Hour, false, ledger.DefaultPolicy(), at(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Claim(e.ctx, comp); err != nil {
			t.Fatalf("claim compensation: %v", err)
		}
		e.ackAll()
		cutoff := at(time.Hour)
		if rows := e.expired(cutoff, 10); len(rows) != 0 {
			t.Fatalf("expired while its compensation is open: %v", keys(rows))
		}
		if n := e.deleteExpired(cutoff, []ledger.Row{orig}); n != 0 {
			t.Fatalf("DeleteExpired of an original with an open compensation = %d, want 0", n)
		}
		e.consistent()
		e.report(tenantA, comp.Row.Key, response(200, "re_1", 2*time.Minute))
		e.ackAll()
		sameKeys(t, "once the compensation settled", e.expired(cutoff, 10), e.get(tenantA, orig.Key), e.get(tenantA, comp.Row.Key))
		e.consistent()
	})

	t.Run("a row changed since it was read is kept", func(t *testing.T) {
		e := newEnv(t, open)
		a := e.claim(baseRequest(), t0).Row
		e.report(tenantA, a.Key, response(200, "pi_a", time.Second))
		e.ackAll()
		cutoff := at(time.Hour)
		batch := e.expired(cutoff, 10)
		// A failure after success: recorded as an alert, the row updated.
		if _, _, err := e.s.Apply(e.ctx, tenantA, a.Key, webhook(ledger.StatusFailedPoison, "", "evt_late", 2*time.Second)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if n := e.deleteExpired(cutoff, batch); n != 0 {
			t.Fatalf("DeleteExpired of a changed row = %d, want 0", n)
		}
		e.get(tenantA, a.Key)
		// Read again, it goes.
		if n := e.deleteExpired(cutoff, e.expired(cutoff, 10)); n != 1 {
			t.Fatalf("DeleteExpired after a fresh read = %d, want 1", n)
		}
		e.consistent()
	})

	t.Run("open rows and rows settled at or after the cutoff are never expired", func(t *testing.T) {
		e := newEnv(t, open)
		p := e.claim(baseRequest(withIntent(`{"n":1}`)), t0).Row
		s := e.claim(baseRequest(withIntent(`{"n":2}`)), t0).Row
		s, _ = e.report(tenantA, s.Key, response(200, "pi_s", time.Minute))
		e.ackAll()
		if rows := e.expired(at(time.Minute), 10); len(rows) != 0 {
			t.Fatalf("expired at its own settled_at: %v", keys(rows))
		}
		if n := e.deleteExpired(at(time.Minute), []ledger.Row{s, e.get(tenantA, p.Key)}); n != 0 {
			t.Fatalf("DeleteExpired = %d, want 0", n)
		}
		if _, err := e.s.Get(e.ctx, tenantA, p.Key); errors.Is(err, ledger.ErrNotFound) {
			t.Fatal("the open row was deleted")
		}
	})
}
