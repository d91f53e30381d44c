package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// action is what a transition case does to its row: a runtime report or a
// piece of evidence applied through Store.Apply.
type action struct {
	outcome  *ledger.Outcome
	evidence *ledger.Evidence
}

func rep(o ledger.Outcome) action     { return action{outcome: &o} }
func apply(ev ledger.Evidence) action { return action{evidence: &ev} }

func withAmount(ev ledger.Evidence, a int64, cur string) ledger.Evidence {
	ev.Amount, ev.Currency = amount(a), cur
	return ev
}

func testTransitions(t *testing.T, open Open) {
	sec := time.Second
	pending := []ledger.Outcome(nil)
	unknown := []ledger.Outcome{timeout(sec)}
	succeeded := []ledger.Outcome{response(200, "pi_1", sec)}
	failed := []ledger.Outcome{response(400, "", sec)}
	expect := mods(withExpect(1050, "usd"))
	cases := []struct {
		name  string
		claim []reqMod
		start []ledger.Outcome // reported after the claim
		do    action
		// want
		err         error
		status      ledger.Status
		changed     bool
		alerts      []ledger.AlertKind // raised by this action
		receipt     string
		replayed    bool
		lastHTTP    int
		shouldRetry *bool
		resolvedBy  ledger.Source // resolution source, when the row settles
	}{
		// Outcome classification from a pending row.
		{name: "2xx with receipt succeeds", start: pending, do: rep(response(201, "pi_1", 2*sec)),
			status: ledger.StatusSucceeded, changed: true, receipt: "pi_1", lastHTTP: 201, resolvedBy: ledger.SourceRuntime},
		{name: "2xx with Idempotent-Replayed succeeds as replayed", start: pending, do: rep(response(200, "pi_1", 2*sec, "idempotent-replayed", "true")),
			status: ledger.StatusSucceeded, changed: true, receipt: "pi_1", replayed: true, lastHTTP: 200, resolvedBy: ledger.SourceRuntime},
		{name: "409 already exists with receipt succeeds", start: pending, do: rep(response(409, "pi_1", 2*sec)),
			status: ledger.StatusSucceeded, changed: true, receipt: "pi_1", lastHTTP: 409, resolvedBy: ledger.SourceRuntime},
		{name: "timeout is unknown", start: pending, do: rep(timeout(2 * sec)),
			status: ledger.StatusUnknown, changed: true},
		{name: "network error is unknown", start: pending, do: rep(networkError(2 * sec)),
			status: ledger.StatusUnknown, changed: true},
		{name: "500 is unknown", start: pending, do: rep(response(500, "", 2*sec)), status: ledger.StatusUnknown, changed: true, lastHTTP: 500},
		{name: "502 is unknown", start: pending, do: rep(response(502, "", 2*sec)), status: ledger.StatusUnknown, changed: true, lastHTTP: 502},
		{name: "503 is unknown", start: pending, do: rep(response(503, "", 2*sec)), status: ledger.StatusUnknown, changed: true, lastHTTP: 503},
		{name: "504 is unknown", start: pending, do: rep(response(504, "", 2*sec)), status: ledger.StatusUnknown, changed: true, lastHTTP: 504},
		{name: "500 with Stripe-Should-Retry false stays unknown", start: pending,
			do:     rep(response(500, "", 2*sec, "Stripe-Should-Retry", "false")),
			status: ledger.StatusUnknown, changed: true, lastHTTP: 500, shouldRetry: ptr(false)},
		{name: "429 stays pending and records should-retry", start: pending, do: rep(response(429, "", 2*sec)),
			status: ledger.StatusPending, lastHTTP: 429, shouldRetry: ptr(true)},
		{name: "409 concurrent use of the key stays pending", start: pending, do: rep(response(409, "", 2*sec)),
			status: ledger.StatusPending, lastHTTP: 409, shouldRetry: ptr(true)},
		{name: "429 with Stripe-Should-Retry false is failed_poison", start: pending,
			do:     rep(response(429, "", 2*sec, "Stripe-Should-Retry", "false")),
			status: ledger.StatusFailedPoison, changed: true, lastHTTP: 429, shouldRetry: ptr(false), resolvedBy: ledger.SourceRuntime},
		{name: "400 is failed_poison", start: pending, do: rep(response(400, "", 2*sec)),
			status: ledger.StatusFailedPoison, changed: true, lastHTTP: 400, resolvedBy: ledger.SourceRuntime},
		{name: "402 declined is failed_poison", start: pending, do: rep(response(402, "", 2*sec, "Stripe-Should-Retry", "true")),
			status: ledger.StatusFailedPoison, changed: true, lastHTTP: 402, shouldRetry: ptr(true), resolvedBy: ledger.SourceRuntime},
		{name: "invalid outcome is refused and changes nothing", start: pending,
			do: rep(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 0, At: at(2 * sec)}), err: ledger.ErrInvalidOutcome},

		// From unknown.
		{name: "unknown to succeeded on a webhook", start: unknown, do: apply(webhook(ledger.StatusSucceeded, "pi_1", "evt_1", 2*sec)),
			status: ledger.StatusSucceeded, changed: true, receipt: "pi_1", resolvedBy: ledger.SourceWebhook},
		{name: "unknown to succeeded on a resolver lookup", start: unknown,
			do:     apply(ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "pi_1", At: at(2 * sec)}),
			status: ledger.StatusSucceeded, changed: true, receipt: "pi_1", resolvedBy: ledger.SourceResolver},
		{name: "unknown to failed_poison on a webhook", start: unknown, do: apply(webhook(ledger.StatusFailedPoison, "pi_1", "evt_1", 2*sec)),
			status: ledger.StatusFailedPoison, changed: true, receipt: "pi_1", resolvedBy: ledger.SourceWebhook},
		{name: "unknown to succeeded by a human", start: unknown, do: apply(human(ledger.StatusSucceeded, 2*sec)),
			status: ledger.StatusSucceeded, changed: true, resolvedBy: ledger.SourceHuman},
		{name: "unknown stays unknown on another timeout", start: unknown, do: rep(timeout(2 * sec)),
			status: ledger.StatusUnknown},
		{name: "progress stores the receipt and keeps the status", start: unknown, do: apply(webhook("", "pi_1", "evt_1", 2*sec)),
			status: ledger.StatusUnknown, receipt: "pi_1"},

		// Succeeded is terminal.
		{name: "succeeded ignores a later failure and records an alert", start: succeeded,
			do:     apply(webhook(ledger.StatusFailedPoison, "", "evt_2", 2*sec)),
			status: ledger.StatusSucceeded, alerts: []ledger.AlertKind{ledger.AlertIgnoredFailure}, receipt: "pi_1", lastHTTP: 200},
		{name: "succeeded ignores a later runtime 400 and records an alert", start: succeeded,
			do:     rep(response(400, "", 2*sec)),
			status: ledger.StatusSucceeded, alerts: []ledger.AlertKind{ledger.AlertIgnoredFailure}, receipt: "pi_1", lastHTTP: 400},
		{name: "succeeded ignores a late timeout", start: succeeded, do: rep(timeout(2 * sec)),
			status: ledger.StatusSucceeded, receipt: "pi_1", lastHTTP: 200},
		{name: "succeeded to failed_poison by a human is an invalid transition", start: succeeded,
			do: apply(human(ledger.StatusFailedPoison, 2*sec)), err: ledger.ErrInvalidTransition},

		// failed_poison.
		{name: "failed_poison to succeeded on a webhook raises late_success", start: failed,
			do:     apply(webhook(ledger.StatusSucceeded, "pi_1", "evt_1", 2*sec)),
			status: ledger.StatusSucceeded, changed: true, alerts: []ledger.AlertKind{ledger.AlertLateSuccess}, receipt: "pi_1", lastHTTP: 400, resolvedBy: ledger.SourceWebhook},
		{name: "failed_poison to succeeded on a runtime 200 raises late_success", start: failed,
			do:     rep(response(200, "pi_1", 2*sec)),
			status: ledger.StatusSucceeded, changed: true, alerts: []ledger.AlertKind{ledger.AlertLateSuccess}, receipt: "pi_1", lastHTTP: 200, resolvedBy: ledger.SourceRuntime},
		{name: "failed_poison to succeeded by a human is an invalid transition", start: failed,
			do: apply(human(ledger.StatusSucceeded, 2*sec)), err: ledger.ErrInvalidTransition},
		{name: "failed_poison ignores a late timeout", start: failed, do: rep(timeout(2 * sec)),
			status: ledger.StatusFailedPoison, lastHTTP: 400},

		// Bad evidence.
		{name: "evidence back to pending is refused", start: unknown,
			do: apply(ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusPending, At: at(2 * sec)}), err: ledger.ErrInvalidStatus},
		{name: "a human resolving to unknown is refused", start: pending, do: apply(human(ledger.StatusUnknown, 2*sec)), err: ledger.ErrInvalidStatus},
		{name: "evidence without a source is refused", start: pending,
			do: apply(ledger.Evidence{Status: ledger.StatusSucceeded, At: at(2 * sec)}), err: ledger.ErrInvalidEvidence},

		// Expect.
		{name: "amount mismatch is an alert, not a success", claim: expect, start: pending,
			do:     apply(withAmount(webhook(ledger.StatusSucceeded, "pi_1", "evt_1", 2*sec), 999, "usd")),
			status: ledger.StatusPending, alerts: []ledger.AlertKind{ledger.AlertMismatch}, receipt: "pi_1"},
		{name: "currency mismatch is an alert, not a success", claim: expect, start: unknown,
			do:     apply(withAmount(webhook(ledger.StatusSucceeded, "pi_1", "evt_1", 2*sec), 1050, "eur")),
			status: ledger.StatusUnknown, alerts: []ledger.AlertKind{ledger.AlertMismatch}, receipt: "pi_1"},
		{name: "matching amount and currency (any case) succeeds", claim: expect, start: unknown,
			do:     apply(withAmount(webhook(ledger.StatusSucceeded, "pi_1", "evt_1", 2*sec), 1050, "USD")),
			status: ledger.StatusSucceeded, changed: true, receipt: "pi_1", resolvedBy: ledger.SourceWebhook},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			before := seed(tc.claim, tc.start...)(e)
			outboxBefore := e.pending()
			var (
				row ledger.Row
				ch  ledger.Change
				err error
			)
			if tc.do.outcome != nil {
				row, ch, err = e.s.Report(e.ctx, before.Tenant, before.Key, *tc.do.outcome)
			} else {
				row, ch, err = e.s.Apply(e.ctx, before.Tenant, before.Key, *tc.do.evidence)
			}
			stored := e.get(before.Tenant, before.Key)
			outbox := e.pending()
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got err %v, want %v", err, tc.err)
				}
				sameRow(t, "row after a refused action", stored, before)
				if len(outbox) != len(outboxBefore) {
					t.Fatalf("outbox: a refused action wrote %d records", len(outbox)-len(outboxBefore))
				}
				return
			}
			if err != nil {
				t.Fatalf("action: %v", err)
			}
			sameRow(t, "stored row vs returned row", stored, row)
			if row.Status != tc.status || ch.Changed != tc.changed || ch.From != before.Status || ch.To != tc.status {
				t.Fatalf("got status %s change %s→%s changed %v, want %s %s→%s %v",
					row.Status, ch.From, ch.To, ch.Changed, tc.status, before.Status, tc.status, tc.changed)
			}
			if !slices.Equal(ch.Alerts, tc.alerts) {
				t.Fatalf("change alerts: got %v, want %v", ch.Alerts, tc.alerts)
			}
			if got, want := alertKinds(row), append(alertKinds(before), tc.alerts...); !slices.Equal(got, want) {
				t.Fatalf("row alerts: got %v, want %v", got, want)
			}
			if row.UpstreamReceiptID != tc.receipt || row.IdempotentReplayed != tc.replayed || row.LastHTTPStatus != tc.lastHTTP {
				t.Fatalf("got receipt %q replayed %v last http %d, want %q %v %d",
					row.UpstreamReceiptID, row.IdempotentReplayed, row.LastHTTPStatus, tc.receipt, tc.replayed, tc.lastHTTP)
			}
			if (row.VendorShouldRetry == nil) != (tc.shouldRetry == nil) || tc.shouldRetry != nil && *row.VendorShouldRetry != *tc.shouldRetry {
				t.Fatalf("vendor_should_retry: got %v, want %v", deref(row.VendorShouldRetry), deref(tc.shouldRetry))
			}
			checkSettled(t, row, tc.resolvedBy)
			// Exactly one outbox record per transition, none otherwise.
			added := outbox[len(outboxBefore):]
			if !tc.changed {
				if len(added) != 0 || ch.Event != nil {
					t.Fatalf("outbox: %d records (event %v) without a transition", len(added), ch.Event)
				}
				e.consistent()
				return
			}
			if len(added) != 1 || ch.Event == nil {
				t.Fatalf("outbox: got %d records (event %v), want 1", len(added), ch.Event)
			}
			ev := added[0].Event
			if ev != *ch.Event || ev.Key != row.Key || ev.Tenant != row.Tenant || ev.RunID != row.RunID ||
				ev.Status != string(row.Status) || ev.ReceiptID != row.UpstreamReceiptID || !ev.At.Equal(row.UpdatedAt) {
				t.Fatalf("outbox event: got %+v, change event %+v, row %s", ev, *ch.Event, rowJSON(row))
			}
			e.consistent()
		})
	}
}

// checkSettled checks the fields that settle with a row: a settled row has
// a resolution and leaves the schedule; an open row has neither.
func checkSettled(t *testing.T, row ledger.Row, by ledger.Source) {
	t.Helper()
	if row.Status.Open() {
		if row.Resolution != nil || row.NextCheckAt.IsZero() {
			t.Fatalf("open row: resolution %v, next_check_at %v", row.Resolution, row.NextCheckAt)
		}
		return
	}
	if !row.NextCheckAt.IsZero() {
		t.Fatalf("settled row still scheduled at %v", row.NextCheckAt)
	}
	if by != "" && (row.Resolution == nil || row.Resolution.Source != by) {
		t.Fatalf("resolution: got %+v, want source %s", row.Resolution, by)
	}
	if row.Status == ledger.StatusSucceeded && row.SucceededAt.IsZero() {
		t.Fatal("succeeded row without succeeded_at")
	}
}

func ptr[T any](v T) *T { return &v }

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
