package ledger_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

var (
	allStatuses = []ledger.Status{ledger.StatusPending, ledger.StatusUnknown, ledger.StatusSucceeded, ledger.StatusFailedPoison}
	allSources  = []ledger.Source{ledger.SourceRuntime, ledger.SourceWebhook, ledger.SourceResolver, ledger.SourceHuman}
)

func TestCanTransition(t *testing.T) {
	type edge struct {
		from, to ledger.Status
	}
	// The design's transition list (§4), and nothing else.
	allowed := map[edge]func(ledger.Source) bool{
		{ledger.StatusPending, ledger.StatusSucceeded}:      func(ledger.Source) bool { return true },
		{ledger.StatusPending, ledger.StatusUnknown}:        func(ledger.Source) bool { return true },
		{ledger.StatusPending, ledger.StatusFailedPoison}:   func(ledger.Source) bool { return true },
		{ledger.StatusUnknown, ledger.StatusSucceeded}:      func(ledger.Source) bool { return true },
		{ledger.StatusUnknown, ledger.StatusFailedPoison}:   func(ledger.Source) bool { return true },
		{ledger.StatusFailedPoison, ledger.StatusSucceeded}: func(s ledger.Source) bool { return s != ledger.SourceHuman },
	}
	for _, from := range allStatuses {
		for _, to := range allStatuses {
			for _, src := range allSources {
				t.Run(fmt.Sprintf("%s to %s by %s", from, to, src), func(t *testing.T) {
					want := false
					if f, ok := allowed[edge{from, to}]; ok {
						want = f(src)
					}
					if got := ledger.CanTransition(from, to, src); got != want {
						t.Fatalf("CanTransition = %v, want %v", got, want)
					}
				})
			}
		}
	}
	t.Run("unknown statuses", func(t *testing.T) {
		if ledger.CanTransition("", ledger.StatusSucceeded, ledger.SourceWebhook) || ledger.CanTransition(ledger.StatusPending, "done", ledger.SourceWebhook) {
			t.Fatal("CanTransition allows a status that does not exist")
		}
	})
}

// baseRow is a fresh pending write_idempotent row claimed at t0, expecting 1050 usd.
func baseRow(t *testing.T) ledger.Row {
	t.Helper()
	return claimAt(t, t0, ledger.ClassWriteIdempotent, false).Row
}

func int64p(v int64) *int64 { return &v }

func TestApply(t *testing.T) {
	p := ledger.DefaultPolicy()
	t1 := t0.Add(5 * time.Minute)
	withStatus := func(s ledger.Status) func(*ledger.Row) {
		return func(r *ledger.Row) {
			r.Status = s
			if s == ledger.StatusSucceeded || s == ledger.StatusFailedPoison {
				r.NextCheckAt = time.Time{}
			}
		}
	}
	runtime := func(o ledger.Outcome) ledger.Evidence { o.At = t1; return ledger.Classify(o) }
	webhook := func(s ledger.Status, receipt string) ledger.Evidence {
		return ledger.Evidence{Source: ledger.SourceWebhook, Status: s, ReceiptID: receipt, VendorEventID: "evt_1", At: t1}
	}
	human := func(s ledger.Status) ledger.Evidence {
		return ledger.Evidence{Source: ledger.SourceHuman, Status: s, Actor: "ops", Note: "checked", At: t1}
	}

	tests := []struct {
		name        string
		row         func(*ledger.Row) // nil: pending as claimed
		ev          ledger.Evidence
		wantStatus  ledger.Status
		wantChanged bool
		wantAlerts  []ledger.AlertKind
		wantErr     error
		check       func(t *testing.T, before, after ledger.Row, ch ledger.Change)
	}{
		{
			name: "runtime 200 settles a pending row", ev: runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1"}),
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.UpstreamReceiptID != "pi_1" || !after.SucceededAt.Equal(t1) || !after.NextCheckAt.IsZero() || after.LastHTTPStatus != 200 {
					t.Fatalf("row %+v", after)
				}
				want := &ledger.Resolution{Source: ledger.SourceRuntime, At: t1}
				if !reflect.DeepEqual(after.Resolution, want) {
					t.Fatalf("resolution %+v, want %+v", after.Resolution, want)
				}
			},
		},
		{
			name:       "a runtime's result is kept with the status it settles",
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: `{"content":[]}`}),
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.Result != `{"content":[]}` {
					t.Fatalf("result %q", after.Result)
				}
			},
		},
		{
			name:       "a refusal's result is kept with failed_poison",
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 422, Result: `{"isError":true}`}),
			wantStatus: ledger.StatusFailedPoison, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.Result != `{"isError":true}` {
					t.Fatalf("result %q", after.Result)
				}
			},
		},
		{
			name:       "a result that leaves the row open is dropped",
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 502, Result: `{"isError":true}`}),
			wantStatus: ledger.StatusUnknown, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.Result != "" {
					t.Fatalf("result %q kept on an open row", after.Result)
				}
			},
		},
		{
			name:       "a success's result joins a row a webhook settled first",
			row:        withStatus(ledger.StatusSucceeded),
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: `{"content":[]}`}),
			wantStatus: ledger.StatusSucceeded,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.Result != `{"content":[]}` {
					t.Fatalf("result %q", after.Result)
				}
			},
		},
		{
			name:       "the first result stays",
			row:        func(r *ledger.Row) { withStatus(ledger.StatusSucceeded)(r); r.Result = `{"first":true}` },
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: `{"second":true}`}),
			wantStatus: ledger.StatusSucceeded,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.Result != `{"first":true}` {
					t.Fatalf("result %q", after.Result)
				}
			},
		},
		{
			name:       "a failure's result is not kept on a row that succeeded",
			row:        withStatus(ledger.StatusSucceeded),
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 422, Result: `{"isError":true}`}),
			wantStatus: ledger.StatusSucceeded, wantAlerts: []ledger.AlertKind{ledger.AlertIgnoredFailure},
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.Result != "" {
					t.Fatalf("result %q kept", after.Result)
				}
			},
		},
		{
			name:       "a timeout of an earlier attempt leaves the retry's lease alone",
			row:        func(r *ledger.Row) { r.Attempt = 2 },
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeTimeout, Attempt: 1}),
			wantStatus: ledger.StatusUnknown, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.PendingUntil.Equal(before.PendingUntil) || !after.NextCheckAt.Equal(before.NextCheckAt) {
					t.Fatalf("pending_until %v → %v, next_check_at %v → %v: the stale report moved them",
						before.PendingUntil, after.PendingUntil, before.NextCheckAt, after.NextCheckAt)
				}
			},
		},
		{
			name:       "a 429 of an earlier attempt leaves the retry's lease alone",
			row:        func(r *ledger.Row) { r.Attempt = 3 },
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429, Attempt: 2}),
			wantStatus: ledger.StatusPending,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.PendingUntil.Equal(before.PendingUntil) {
					t.Fatalf("pending_until %v → %v", before.PendingUntil, after.PendingUntil)
				}
			},
		},
		{
			name:       "a 429 of the current attempt ends its lease",
			row:        func(r *ledger.Row) { r.Attempt = 3 },
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429, Attempt: 3}),
			wantStatus: ledger.StatusPending,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.PendingUntil.Equal(t1) {
					t.Fatalf("pending_until %v, want %v", after.PendingUntil, t1)
				}
			},
		},
		{
			name:       "a success of an earlier attempt still settles the row",
			row:        func(r *ledger.Row) { r.Attempt = 2 },
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", Attempt: 1}),
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
		},
		{
			name: "runtime 200 replayed records it", ev: runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", Headers: map[string]string{"Idempotent-Replayed": "true"}}),
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.IdempotentReplayed {
					t.Fatal("idempotent_replayed not recorded")
				}
			},
		},
		{
			name: "runtime timeout makes it unknown and ends the lease", ev: runtime(ledger.Outcome{Kind: ledger.OutcomeTimeout}),
			wantStatus: ledger.StatusUnknown, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.PendingUntil.Equal(t1) || !after.NextCheckAt.Equal(t1.Add(p.Grace)) || after.Resolution != nil {
					t.Fatalf("pending_until %v next_check_at %v resolution %+v", after.PendingUntil, after.NextCheckAt, after.Resolution)
				}
			},
		},
		{
			name: "runtime 503 makes it unknown and blocks retries", ev: runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 503}),
			wantStatus: ledger.StatusUnknown, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.LastHTTPStatus != 503 || ledger.RetryAllowed(after, t1.Add(time.Hour)) {
					t.Fatalf("last_http_status %d, retry allowed %v", after.LastHTTPStatus, ledger.RetryAllowed(after, t1.Add(time.Hour)))
				}
			},
		},
		{
			name: "runtime 400 fails it", ev: runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 400}),
			wantStatus: ledger.StatusFailedPoison, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.NextCheckAt.IsZero() || after.Resolution == nil || !after.SucceededAt.IsZero() {
					t.Fatalf("row %+v", after)
				}
			},
		},
		{
			name: "runtime 429 keeps pending, ends the lease, records should_retry", ev: runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429}),
			wantStatus: ledger.StatusPending,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.PendingUntil.Equal(t1) || !after.NextCheckAt.Equal(t1.Add(p.Grace)) || after.LastHTTPStatus != 429 ||
					after.VendorShouldRetry == nil || !*after.VendorShouldRetry || !after.UpdatedAt.Equal(t1) {
					t.Fatalf("row %+v", after)
				}
				// The lease is over, so the next claim may retry at once.
				if !ledger.RetryAllowed(after, t1) {
					t.Fatal("retry not allowed after a 429")
				}
			},
		},
		{
			name: "second timeout on unknown moves the next check", row: withStatus(ledger.StatusUnknown), ev: runtime(ledger.Outcome{Kind: ledger.OutcomeTimeout}),
			wantStatus: ledger.StatusUnknown,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !after.NextCheckAt.Equal(t1.Add(p.Grace)) || !after.PendingUntil.Equal(t1) {
					t.Fatalf("next_check_at %v pending_until %v", after.NextCheckAt, after.PendingUntil)
				}
			},
		},
		{
			name: "timeout after the timeout keeps the last http status", row: func(r *ledger.Row) { r.Status, r.LastHTTPStatus = ledger.StatusUnknown, 502 },
			ev: runtime(ledger.Outcome{Kind: ledger.OutcomeTimeout}), wantStatus: ledger.StatusUnknown,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.LastHTTPStatus != 502 {
					t.Fatalf("last_http_status %d, want 502 kept", after.LastHTTPStatus)
				}
			},
		},
		{
			name: "webhook progress stores the receipt, keeps the lease", ev: webhook("", "pi_9"), wantStatus: ledger.StatusPending,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.UpstreamReceiptID != "pi_9" || !after.PendingUntil.Equal(before.PendingUntil) || !after.NextCheckAt.Equal(before.NextCheckAt) || !after.UpdatedAt.Equal(t1) {
					t.Fatalf("row %+v", after)
				}
			},
		},
		{
			name: "webhook success on unknown", row: withStatus(ledger.StatusUnknown), ev: webhook(ledger.StatusSucceeded, "ch_1"),
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				want := &ledger.Resolution{Source: ledger.SourceWebhook, VendorEventID: "evt_1", At: t1}
				if !reflect.DeepEqual(after.Resolution, want) || after.UpstreamReceiptID != "ch_1" {
					t.Fatalf("resolution %+v receipt %s", after.Resolution, after.UpstreamReceiptID)
				}
			},
		},
		{name: "webhook failure on unknown", row: withStatus(ledger.StatusUnknown), ev: webhook(ledger.StatusFailedPoison, ""), wantStatus: ledger.StatusFailedPoison, wantChanged: true},
		{name: "webhook unknown on pending", ev: webhook(ledger.StatusUnknown, ""), wantStatus: ledger.StatusUnknown, wantChanged: true},
		{name: "webhook unknown on failed_poison is ignored", row: withStatus(ledger.StatusFailedPoison), ev: webhook(ledger.StatusUnknown, ""), wantStatus: ledger.StatusFailedPoison},
		{name: "webhook unknown on succeeded is ignored", row: withStatus(ledger.StatusSucceeded), ev: webhook(ledger.StatusUnknown, ""), wantStatus: ledger.StatusSucceeded},
		{
			name: "late success on failed_poison", row: withStatus(ledger.StatusFailedPoison), ev: webhook(ledger.StatusSucceeded, "ch_1"),
			wantStatus: ledger.StatusSucceeded, wantChanged: true, wantAlerts: []ledger.AlertKind{ledger.AlertLateSuccess},
		},
		{
			name: "late success from the resolver", row: withStatus(ledger.StatusFailedPoison),
			ev:         ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", At: t1},
			wantStatus: ledger.StatusSucceeded, wantChanged: true, wantAlerts: []ledger.AlertKind{ledger.AlertLateSuccess},
		},
		{
			name: "late success reported by the runtime", row: withStatus(ledger.StatusFailedPoison),
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1"}),
			wantStatus: ledger.StatusSucceeded, wantChanged: true, wantAlerts: []ledger.AlertKind{ledger.AlertLateSuccess},
		},
		{
			name: "failure after success is recorded, not applied", row: withStatus(ledger.StatusSucceeded), ev: webhook(ledger.StatusFailedPoison, ""),
			wantStatus: ledger.StatusSucceeded, wantAlerts: []ledger.AlertKind{ledger.AlertIgnoredFailure},
		},
		{
			name: "runtime 400 after success is recorded, not applied", row: withStatus(ledger.StatusSucceeded),
			ev:         runtime(ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 400}),
			wantStatus: ledger.StatusSucceeded, wantAlerts: []ledger.AlertKind{ledger.AlertIgnoredFailure},
		},
		{
			name: "duplicate success keeps the first receipt", row: func(r *ledger.Row) { withStatus(ledger.StatusSucceeded)(r); r.UpstreamReceiptID = "ch_first" },
			ev: webhook(ledger.StatusSucceeded, "ch_second"), wantStatus: ledger.StatusSucceeded,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if !reflect.DeepEqual(after, before) {
					t.Fatalf("a duplicate success changed the row:\n got %+v\nwant %+v", after, before)
				}
			},
		},
		{name: "timeout after failure is ignored", row: withStatus(ledger.StatusFailedPoison), ev: runtime(ledger.Outcome{Kind: ledger.OutcomeTimeout}), wantStatus: ledger.StatusFailedPoison},
		{
			name: "mismatched amount raises an alert instead of a success", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "ch_1", Amount: int64p(999), Currency: "usd", At: t1},
			wantStatus: ledger.StatusPending, wantAlerts: []ledger.AlertKind{ledger.AlertMismatch},
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if d := after.Alerts[0].Detail; d != "expected 1050 usd, evidence says 999 usd" {
					t.Fatalf("alert detail %q", d)
				}
			},
		},
		{
			name: "mismatched currency", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, Amount: int64p(1050), Currency: "EUR", At: t1},
			wantStatus: ledger.StatusPending, wantAlerts: []ledger.AlertKind{ledger.AlertMismatch},
		},
		{
			name: "mismatch on a failed row is not a late success", row: withStatus(ledger.StatusFailedPoison),
			ev:         ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, Amount: int64p(1), At: t1},
			wantStatus: ledger.StatusFailedPoison, wantAlerts: []ledger.AlertKind{ledger.AlertMismatch},
		},
		{
			name: "matching amount, currency in another case", ev: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, Amount: int64p(1050), Currency: "USD", At: t1},
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
		},
		{
			name: "evidence without an amount is not a mismatch", ev: webhook(ledger.StatusSucceeded, "ch_1"),
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
		},
		{
			name: "no expect, any amount", row: func(r *ledger.Row) { r.Expect = nil },
			ev:         ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, Amount: int64p(1), Currency: "jpy", At: t1},
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
		},
		{
			name: "human resolves pending", ev: human(ledger.StatusSucceeded), wantStatus: ledger.StatusSucceeded, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				want := &ledger.Resolution{Source: ledger.SourceHuman, Actor: "ops", Note: "checked", At: t1}
				if !reflect.DeepEqual(after.Resolution, want) {
					t.Fatalf("resolution %+v, want %+v", after.Resolution, want)
				}
			},
		},
		{name: "human fails unknown", row: withStatus(ledger.StatusUnknown), ev: human(ledger.StatusFailedPoison), wantStatus: ledger.StatusFailedPoison, wantChanged: true},
		{name: "human repeats a success", row: withStatus(ledger.StatusSucceeded), ev: human(ledger.StatusSucceeded), wantStatus: ledger.StatusSucceeded},
		{name: "human repeats a failure", row: withStatus(ledger.StatusFailedPoison), ev: human(ledger.StatusFailedPoison), wantStatus: ledger.StatusFailedPoison},
		{name: "human cannot fail a success", row: withStatus(ledger.StatusSucceeded), ev: human(ledger.StatusFailedPoison), wantErr: ledger.ErrInvalidTransition},
		{name: "human cannot revive a failure", row: withStatus(ledger.StatusFailedPoison), ev: human(ledger.StatusSucceeded), wantErr: ledger.ErrInvalidTransition},
		{name: "human cannot mark unknown", ev: human(ledger.StatusUnknown), wantErr: ledger.ErrInvalidStatus},
		{name: "no evidence leads back to pending", row: withStatus(ledger.StatusUnknown), ev: webhook(ledger.StatusPending, ""), wantErr: ledger.ErrInvalidStatus},
		{name: "invalid source", ev: ledger.Evidence{Source: "mail", Status: ledger.StatusSucceeded, At: t1}, wantErr: ledger.ErrInvalidEvidence},
		{
			name:       "evidence time is stored in UTC",
			ev:         ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, At: t1.In(time.FixedZone("PST", -8*3600))},
			wantStatus: ledger.StatusSucceeded, wantChanged: true,
			check: func(t *testing.T, before, after ledger.Row, ch ledger.Change) {
				if after.UpdatedAt.Location() != time.UTC || after.SucceededAt.Location() != time.UTC || ch.Event.At.Location() != time.UTC {
					t.Fatalf("times not UTC: %v %v %v", after.UpdatedAt, after.SucceededAt, ch.Event.At)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := baseRow(t)
			if tt.row != nil {
				tt.row(&row)
			}
			before := row.Clone()

			ch, err := ledger.Apply(&row, tt.ev, p)

			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Apply = %+v, %v; want %v", ch, err, tt.wantErr)
				}
				if row.Status != before.Status || ch.Changed || ch.Event != nil {
					t.Fatalf("a refused Apply changed the status: %s, change %+v", row.Status, ch)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if row.Status != tt.wantStatus || ch.To != tt.wantStatus || ch.From != before.Status || ch.Changed != tt.wantChanged {
				t.Fatalf("Apply: row %s, change %s→%s changed=%v; want %s changed=%v", row.Status, ch.From, ch.To, ch.Changed, tt.wantStatus, tt.wantChanged)
			}
			if !slices.Equal(ch.Alerts, tt.wantAlerts) {
				t.Fatalf("Apply alerts %v, want %v", ch.Alerts, tt.wantAlerts)
			}
			var rowAlerts []ledger.AlertKind
			for _, a := range row.Alerts {
				rowAlerts = append(rowAlerts, a.Kind)
				if a.Source != tt.ev.Source || a.VendorEventID != tt.ev.VendorEventID || !a.At.Equal(tt.ev.At) {
					t.Fatalf("alert %+v does not name the evidence %+v", a, tt.ev)
				}
			}
			if !slices.Equal(rowAlerts, tt.wantAlerts) {
				t.Fatalf("row alerts %v, want %v", rowAlerts, tt.wantAlerts)
			}
			if tt.wantChanged {
				e := ch.Event
				if e == nil {
					t.Fatal("a status change without an outbox event")
				}
				want := ledger.Event{
					Key: row.Key, VendorKey: row.WireKey(), Tenant: row.Tenant, RunID: row.RunID, Tool: row.Tool, ToolCallID: row.ToolCallID,
					Status: string(tt.wantStatus), ReceiptID: row.UpstreamReceiptID, Source: tt.ev.Source,
					VendorEventID: tt.ev.VendorEventID, At: tt.ev.At.UTC(),
				}
				if !reflect.DeepEqual(*e, want) {
					t.Fatalf("event:\n got %+v\nwant %+v", *e, want)
				}
				if e.MsgID() != row.Tenant+":"+row.Key+":"+string(tt.wantStatus) {
					t.Fatalf("MsgID = %s", e.MsgID())
				}
				if !row.UpdatedAt.Equal(tt.ev.At) {
					t.Fatalf("updated_at %v, want %v", row.UpdatedAt, tt.ev.At)
				}
			} else if ch.Event != nil {
				t.Fatalf("no status change, but an event %+v", ch.Event)
			}
			if tt.check != nil {
				tt.check(t, before, row, ch)
			}

			// Apply is deterministic: a store may re-run it when a group
			// commit retries.
			again := before.Clone()
			ch2, err2 := ledger.Apply(&again, tt.ev, p)
			if err2 != nil || !reflect.DeepEqual(again, row) || !reflect.DeepEqual(ch2, ch) {
				t.Fatalf("Apply re-run differs:\n got %+v %+v\nwant %+v %+v", again, ch2, row, ch)
			}
		})
	}
}

func TestApplyCapsAlerts(t *testing.T) {
	row := baseRow(t)
	row.Status = ledger.StatusSucceeded
	for i := 0; i < ledger.MaxAlertsPerRow+10; i++ {
		ev := ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusFailedPoison, VendorEventID: fmt.Sprintf("evt_%d", i), At: t0.Add(time.Duration(i) * time.Second)}
		ch, err := ledger.Apply(&row, ev, ledger.DefaultPolicy())
		if err != nil || !slices.Equal(ch.Alerts, []ledger.AlertKind{ledger.AlertIgnoredFailure}) {
			t.Fatalf("Apply %d = %+v, %v", i, ch, err)
		}
	}
	if got := len(row.Alerts); got != ledger.MaxAlertsPerRow {
		t.Fatalf("len(alerts) = %d, want %d", got, ledger.MaxAlertsPerRow)
	}
	if first, last := row.Alerts[0].VendorEventID, row.Alerts[len(row.Alerts)-1].VendorEventID; first != "evt_10" || last != "evt_41" {
		t.Fatalf("kept alerts %s..%s, want the newest evt_10..evt_41", first, last)
	}
}

func TestEscalate(t *testing.T) {
	at := t0.Add(2 * time.Hour).In(time.FixedZone("CET", 3600))
	tests := []struct {
		name   string
		status ledger.Status
		paged  bool
		want   bool
	}{
		{name: "pending", status: ledger.StatusPending, want: true},
		{name: "unknown", status: ledger.StatusUnknown, want: true},
		{name: "already paged", status: ledger.StatusUnknown, paged: true},
		{name: "succeeded", status: ledger.StatusSucceeded},
		{name: "failed_poison", status: ledger.StatusFailedPoison},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := baseRow(t)
			row.Status = tt.status
			if tt.paged {
				row.PagedAt = t0.Add(time.Hour)
			}
			before := row.Clone()
			e, ok := ledger.Escalate(&row, at)
			if ok != tt.want {
				t.Fatalf("Escalate = %v, want %v", ok, tt.want)
			}
			if !ok {
				if !reflect.DeepEqual(row, before) || e != (ledger.Event{}) {
					t.Fatalf("a refused Escalate changed the row or returned %+v", e)
				}
				return
			}
			if !row.PagedAt.Equal(at) || row.PagedAt.Location() != time.UTC || !row.UpdatedAt.Equal(at) || row.Status != tt.status {
				t.Fatalf("row paged_at %v updated_at %v status %s", row.PagedAt, row.UpdatedAt, row.Status)
			}
			if e.Status != ledger.EventEscalated || e.Source != ledger.SourceResolver || e.Key != row.Key || e.MsgID() != row.Tenant+":"+row.Key+":escalated" || !e.At.Equal(at) {
				t.Fatalf("event %+v", e)
			}
			if _, again := ledger.Escalate(&row, at.Add(time.Hour)); again {
				t.Fatal("a row was paged twice")
			}
		})
	}
}

func TestReschedule(t *testing.T) {
	next := t0.Add(3 * time.Hour).In(time.FixedZone("CET", 3600))
	for _, s := range allStatuses {
		t.Run(string(s), func(t *testing.T) {
			row := baseRow(t)
			row.Status = s
			before := row.Clone()
			got := ledger.Reschedule(&row, next)
			if want := s.Open(); got != want {
				t.Fatalf("Reschedule = %v, want %v", got, want)
			}
			if !got {
				if !reflect.DeepEqual(row, before) {
					t.Fatal("Reschedule changed a settled row")
				}
				return
			}
			if !row.NextCheckAt.Equal(next) || row.NextCheckAt.Location() != time.UTC {
				t.Fatalf("next_check_at %v", row.NextCheckAt)
			}
		})
	}
}

func TestStatusAndClassPredicates(t *testing.T) {
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"pending valid", ledger.StatusPending.Valid(), true},
		{"failed_poison valid", ledger.StatusFailedPoison.Valid(), true},
		{"empty status invalid", ledger.Status("").Valid(), false},
		{"upper-case status invalid", ledger.Status("PENDING").Valid(), false},
		{"pending open", ledger.StatusPending.Open(), true},
		{"unknown open", ledger.StatusUnknown.Open(), true},
		{"succeeded closed", ledger.StatusSucceeded.Open(), false},
		{"failed closed", ledger.StatusFailedPoison.Open(), false},
		{"write_ledger valid", ledger.ClassWriteLedger.Valid(), true},
		{"write_irreversible valid", ledger.ClassWriteIrreversible.Valid(), true},
		{"read class invalid", ledger.ToolClass("read").Valid(), false},
		{"human source valid", ledger.SourceHuman.Valid(), true},
		{"empty source invalid", ledger.Source("").Valid(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}
