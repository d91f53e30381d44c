package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// eventKey is what identifies an outbox record for the suite: the
// JetStream message id <tenant>:<key>:<status>.
func eventKeys(recs []ledger.OutboxRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Event.MsgID()
	}
	return out
}

func testOutbox(t *testing.T, open Open) {
	e := newEnv(t, open)
	notify := e.s.Notify()
	drain(notify)
	var want []string // message ids of the transitions made, in commit order

	// Each step makes zero or one transition; a transition must notify.
	a := e.claim(baseRequest(withIntent(`{"n":1}`)), t0).Row
	b := e.claim(baseRequest(withIntent(`{"n":2}`), withExpect(500, "usd")), t0).Row
	c := e.claim(baseRequest(withIntent(`{"n":3}`)), t0).Row
	steps := []struct {
		name string
		do   func() (changed bool, msgID string)
	}{
		{"a times out", func() (bool, string) {
			_, ch := e.report(tenantA, a.Key, timeout(time.Second))
			return ch.Changed, a.Tenant + ":" + a.Key + ":unknown"
		}},
		{"b gets a 429 (no transition)", func() (bool, string) {
			_, ch := e.report(tenantA, b.Key, response(429, "", time.Second))
			return ch.Changed, ""
		}},
		{"b gets a mismatched success (alert, no transition)", func() (bool, string) {
			_, ch, err := e.s.Apply(e.ctx, tenantA, b.Key, withAmount(webhook(ledger.StatusSucceeded, "pi_b", "evt_b", 2*time.Second), 999, "usd"))
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			return ch.Changed, ""
		}},
		{"c is escalated", func() (bool, string) {
			_, ok, err := e.s.Escalate(e.ctx, tenantA, c.Key, at(time.Hour))
			if err != nil {
				t.Fatalf("Escalate: %v", err)
			}
			return ok, c.Tenant + ":" + c.Key + ":escalated"
		}},
		{"a succeeds by webhook", func() (bool, string) {
			res, err := e.s.Ingest(e.ctx, byLocalID(a, "evt_a", evSucceeded))
			if err != nil {
				t.Fatalf("Ingest: %v", err)
			}
			return res.Change.Changed, a.Tenant + ":" + a.Key + ":succeeded"
		}},
		{"a's webhook again (duplicate)", func() (bool, string) {
			res, err := e.s.Ingest(e.ctx, byLocalID(a, "evt_a", evSucceeded))
			if err != nil {
				t.Fatalf("Ingest: %v", err)
			}
			return res.Change.Changed, ""
		}},
		{"c fails by a human", func() (bool, string) {
			_, ch, err := e.s.Apply(e.ctx, tenantA, c.Key, human(ledger.StatusFailedPoison, 2*time.Hour))
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			return ch.Changed, c.Tenant + ":" + c.Key + ":failed_poison"
		}},
		{"b fails by a 400", func() (bool, string) {
			_, ch := e.report(tenantA, b.Key, response(400, "", 3*time.Hour))
			return ch.Changed, b.Tenant + ":" + b.Key + ":failed_poison"
		}},
	}
	for _, st := range steps {
		drain(notify)
		changed, id := st.do()
		if changed != (id != "") {
			t.Fatalf("%s: changed %v, want %v", st.name, changed, id != "")
		}
		if changed {
			want = append(want, id)
			waitNotify(t, notify)
		}
		if got := eventKeys(e.pending()); !slices.Equal(got, want) {
			t.Fatalf("after %s: outbox\n got %v\nwant %v", st.name, got, want)
		}
	}

	recs := e.pending()
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq <= recs[i-1].Seq {
			t.Fatalf("outbox seqs not increasing: %d then %d", recs[i-1].Seq, recs[i].Seq)
		}
	}
	if got, err := e.s.PendingEvents(e.ctx, 2); err != nil || !slices.Equal(eventKeys(got), want[:2]) {
		t.Fatalf("PendingEvents(2): got %v err %v, want %v", eventKeys(got), err, want[:2])
	}
	// EventsAfter reads on from a sequence number, whether or not a record
	// still has it.
	for _, tc := range []struct {
		name  string
		after uint64
		limit int
		want  []string
	}{
		{"from the start", 0, 100, want},
		{"after the first", recs[0].Seq, 2, want[1:3]},
		{"from just below the second", recs[1].Seq - 1, 1, want[1:2]},
		{"after the last", recs[len(recs)-1].Seq, 10, nil},
		{"no limit", 0, 0, nil},
	} {
		got, err := e.s.EventsAfter(e.ctx, tc.after, tc.limit)
		if err != nil || !slices.Equal(eventKeys(got), tc.want) {
			t.Fatalf("EventsAfter %s (%d, %d): got %v err %v, want %v", tc.name, tc.after, tc.limit, eventKeys(got), err, tc.want)
		}
	}
	if n, err := e.s.CountEvents(e.ctx); err != nil || n != len(want) {
		t.Fatalf("CountEvents: got %d err %v, want %d", n, err, len(want))
	}
	// Ack the second and an unknown seq: only the second goes.
	if err := e.s.AckEvents(e.ctx, recs[1].Seq, recs[len(recs)-1].Seq+1000); err != nil {
		t.Fatalf("AckEvents: %v", err)
	}
	want = slices.Delete(want, 1, 2)
	if got := eventKeys(e.pending()); !slices.Equal(got, want) {
		t.Fatalf("after ack: outbox\n got %v\nwant %v", got, want)
	}
	if got, err := e.s.EventsAfter(e.ctx, recs[0].Seq, 1); err != nil || !slices.Equal(eventKeys(got), want[1:2]) {
		t.Fatalf("EventsAfter across a deleted record: got %v err %v, want %v", eventKeys(got), err, want[1:2])
	}
	if n, err := e.s.CountEvents(e.ctx); err != nil || n != len(want) {
		t.Fatalf("CountEvents after ack: got %d err %v, want %d", n, err, len(want))
	}
	// Acking twice is harmless.
	if err := e.s.AckEvents(e.ctx, recs[1].Seq); err != nil {
		t.Fatalf("AckEvents again: %v", err)
	}
	var all []uint64
	for _, r := range e.pending() {
		all = append(all, r.Seq)
	}
	if err := e.s.AckEvents(e.ctx, all...); err != nil {
		t.Fatalf("AckEvents all: %v", err)
	}
	if got := e.pending(); len(got) != 0 {
		t.Fatalf("after acking all: %d records left", len(got))
	}
	if n, err := e.s.CountEvents(e.ctx); err != nil || n != 0 {
		t.Fatalf("CountEvents after acking all: got %d err %v, want 0", n, err)
	}
	// Sequence numbers are never reused, even with an empty outbox.
	d := e.claim(baseRequest(withIntent(`{"n":4}`)), t0).Row
	drain(notify)
	e.report(tenantA, d.Key, timeout(time.Second))
	waitNotify(t, notify)
	got := e.pending()
	if len(got) != 1 || got[0].Seq <= recs[len(recs)-1].Seq {
		t.Fatalf("new record after acking all: %+v, want one with seq > %d", got, recs[len(recs)-1].Seq)
	}
	e.consistent()
}

// testClose: a closed store answers ErrUnavailable to every call.
func testClose(t *testing.T, open Open) {
	e := newEnv(t, open)
	row := e.claim(baseRequest(), t0).Row
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := e.ctx
	c := newClaim(t, baseRequest(), at(time.Minute))
	calls := []struct {
		name string
		call func() error
	}{
		{"Claim", func() error { _, err := e.s.Claim(ctx, c); return err }},
		{"Report", func() error { _, _, err := e.s.Report(ctx, tenantA, row.Key, timeout(time.Minute)); return err }},
		{"Get", func() error { _, err := e.s.Get(ctx, tenantA, row.Key); return err }},
		{"List", func() error { _, err := e.s.List(ctx, ledger.ListQuery{Tenant: tenantA}); return err }},
		{"Apply", func() error {
			_, _, err := e.s.Apply(ctx, tenantA, row.Key, human(ledger.StatusSucceeded, time.Minute))
			return err
		}},
		{"Ingest", func() error { _, err := e.s.Ingest(ctx, byLocalID(row, "evt_1", evSucceeded)); return err }},
		{"Escalate", func() error { _, _, err := e.s.Escalate(ctx, tenantA, row.Key, at(time.Hour)); return err }},
		{"PruneInbox", func() error { _, err := e.s.PruneInbox(ctx, at(time.Hour)); return err }},
		{"Due", func() error { _, err := e.s.Due(ctx, at(time.Hour), 10); return err }},
		{"Reschedule", func() error { return e.s.Reschedule(ctx, tenantA, row.Key, at(time.Hour)) }},
		{"PendingEvents", func() error { _, err := e.s.PendingEvents(ctx, 10); return err }},
		{"EventsAfter", func() error { _, err := e.s.EventsAfter(ctx, 0, 10); return err }},
		{"CountEvents", func() error { _, err := e.s.CountEvents(ctx); return err }},
		{"AckEvents", func() error { return e.s.AckEvents(ctx, 1) }},
		{"CountRows", func() error { _, err := e.s.CountRows(ctx); return err }},
	}
	if cc, ok := e.s.(consistencyChecker); ok {
		calls = append(calls, struct {
			name string
			call func() error
		}{"CheckConsistency", func() error { return cc.CheckConsistency(ctx) }})
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ledger.ErrUnavailable) {
				t.Fatalf("%s after Close: got %v, want ErrUnavailable", tc.name, err)
			}
		})
	}
	// A second Close must not panic; its error is the store's business.
	_ = e.s.Close()
	t.Run("canceled context", func(t *testing.T) {
		e := newEnv(t, open)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		if _, err := e.s.Claim(ctx, newClaim(t, baseRequest(), t0)); err == nil {
			// A store may finish a call whose context is already done only if
			// it did nothing wrong; what it must not do is report success
			// without the row.
			if _, gerr := e.s.Get(e.ctx, tenantA, c.Row.Key); gerr != nil {
				t.Fatalf("Claim with a canceled context succeeded but the row is missing: %v", gerr)
			}
		}
	})
}
