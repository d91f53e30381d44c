package storetest

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// rows names the rows a case set up.
type rows map[string]ledger.Row

func delivery(tenant, eventID string, d time.Duration, ev ledger.Evidence) ledger.Delivery {
	ev.VendorEventID = eventID
	return ledger.Delivery{Tenant: tenant, Vendor: vendor, EventID: eventID, Evidence: ev, At: at(d)}
}

func byLocalID(r ledger.Row, eventID string, ev ledger.Evidence) ledger.Delivery {
	d := delivery(r.Tenant, eventID, 10*time.Second, ev)
	d.LocalID = r.MetadataLocalID
	return d
}

var (
	evSucceeded = webhook(ledger.StatusSucceeded, "pi_1", "", 10*time.Second)
	evFailed    = webhook(ledger.StatusFailedPoison, "pi_1", "", 10*time.Second)
	evProgress  = webhook("", "pi_1", "", 10*time.Second)
)

func receipt(ev ledger.Evidence, id string) ledger.Evidence {
	ev.ReceiptID = id
	return ev
}

// claimed sets up one pending row per name; names starting with "b:" belong
// to tenantB, "biz:" rows use the business key "order-7" in each tenant.
func claimed(names ...string) func(e *env) rows {
	return func(e *env) rows {
		out := rows{}
		for i, n := range names {
			ms := []reqMod{withIntent(`{"amount":` + strconv.Itoa(100+i) + `,"currency":"usd"}`)}
			switch n {
			case "a":
			case "b":
				ms = append(ms, withTenant(tenantB))
			case "biz-a":
				ms = append(ms, withKey("order-7"))
			case "biz-b":
				ms = append(ms, withKey("order-7"), withTenant(tenantB))
			default:
				e.t.Fatalf("unknown row name %q", n)
			}
			out[n] = e.claim(baseRequest(ms...), t0).Row
		}
		return out
	}
}

func testIngest(t *testing.T, open Open) {
	cases := []struct {
		name  string
		setup func(e *env) rows
		prior func(r rows) []ledger.Delivery
		d     func(r rows) ledger.Delivery
		// want
		err     error
		outcome ledger.IngestOutcome
		joined  string        // the row the event joined ("" when none)
		status  ledger.Status // the joined row's status after
		events  int           // outbox records written
		alerts  []ledger.AlertKind
	}{
		{name: "accepted by local id", setup: claimed("a"),
			d:       func(r rows) ledger.Delivery { return byLocalID(r["a"], "evt_1", evSucceeded) },
			outcome: ledger.IngestAccepted, joined: "a", status: ledger.StatusSucceeded, events: 1},
		{name: "accepted failure by local id", setup: claimed("a"),
			d:       func(r rows) ledger.Delivery { return byLocalID(r["a"], "evt_1", evFailed) },
			outcome: ledger.IngestAccepted, joined: "a", status: ledger.StatusFailedPoison, events: 1},
		{name: "accepted progress stores the receipt only", setup: claimed("a"),
			d:       func(r rows) ledger.Delivery { return byLocalID(r["a"], "evt_1", evProgress) },
			outcome: ledger.IngestAccepted, joined: "a", status: ledger.StatusPending},
		{name: "duplicate event id changes nothing", setup: claimed("a"),
			prior:   func(r rows) []ledger.Delivery { return []ledger.Delivery{byLocalID(r["a"], "evt_1", evProgress)} },
			d:       func(r rows) ledger.Delivery { return byLocalID(r["a"], "evt_1", evSucceeded) },
			outcome: ledger.IngestDuplicate},
		{name: "duplicate of an ignored event changes nothing", setup: claimed("a"),
			prior: func(r rows) []ledger.Delivery {
				d := byLocalID(r["a"], "evt_1", ledger.Evidence{})
				d.Ignore = true
				return []ledger.Delivery{d}
			},
			d:       func(r rows) ledger.Delivery { return byLocalID(r["a"], "evt_1", evSucceeded) },
			outcome: ledger.IngestDuplicate},
		{name: "same event id from another vendor is not a duplicate", setup: claimed("a"),
			prior: func(r rows) []ledger.Delivery { return []ledger.Delivery{byLocalID(r["a"], "evt_1", evProgress)} },
			d: func(r rows) ledger.Delivery {
				d := byLocalID(r["a"], "evt_1", evSucceeded)
				d.Vendor = "paypal"
				return d
			},
			outcome: ledger.IngestAccepted, joined: "a", status: ledger.StatusSucceeded, events: 1},
		{name: "another tenant's local id is foreign and changes nothing", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := byLocalID(r["a"], "evt_1", evSucceeded)
				d.Tenant = tenantB
				return d
			},
			outcome: ledger.IngestForeignTenant, alerts: []ledger.AlertKind{ledger.AlertForeignTenant}},
		{name: "no local id and an unknown key is unmatched", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := delivery(tenantA, "evt_1", 10*time.Second, evSucceeded)
				d.IdempotencyKey = "no-such-key"
				return d
			},
			outcome: ledger.IngestUnmatched},
		{name: "ignored event type changes nothing", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := byLocalID(r["a"], "evt_1", ledger.Evidence{})
				d.Ignore = true
				return d
			},
			outcome: ledger.IngestIgnored},
		{name: "joined by the echoed idempotency key", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := delivery(tenantA, "evt_1", 10*time.Second, evSucceeded)
				d.IdempotencyKey = r["a"].Key
				return d
			},
			outcome: ledger.IngestAccepted, joined: "a", status: ledger.StatusSucceeded, events: 1},
		{name: "an unknown local id falls back to the echoed key", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := delivery(tenantA, "evt_1", 10*time.Second, evSucceeded)
				d.LocalID = ledger.LocalIDPrefix + "00000000000000000000000000000000"
				d.IdempotencyKey = r["a"].Key
				return d
			},
			outcome: ledger.IngestAccepted, joined: "a", status: ledger.StatusSucceeded, events: 1},
		{name: "an echoed business key held by two tenants joins the endpoint's tenant", setup: claimed("biz-a", "biz-b"),
			d: func(r rows) ledger.Delivery {
				d := delivery(tenantB, "evt_1", 10*time.Second, evSucceeded)
				d.IdempotencyKey = "order-7"
				return d
			},
			outcome: ledger.IngestAccepted, joined: "biz-b", status: ledger.StatusSucceeded, events: 1},
		{name: "an echoed business key held by another tenant only is foreign", setup: claimed("biz-a"),
			d: func(r rows) ledger.Delivery {
				d := delivery(tenantB, "evt_1", 10*time.Second, evSucceeded)
				d.IdempotencyKey = "order-7"
				return d
			},
			outcome: ledger.IngestForeignTenant, alerts: []ledger.AlertKind{ledger.AlertForeignTenant}},
		{name: "an unknown local id is parked as an orphan", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := delivery(tenantA, "evt_1", 10*time.Second, evSucceeded)
				d.LocalID = ledger.LocalIDPrefix + "00000000000000000000000000000000"
				return d
			},
			outcome: ledger.IngestOrphan},
		{name: "a delivery without an event id is refused", setup: claimed("a"),
			d:   func(r rows) ledger.Delivery { return byLocalID(r["a"], "", evSucceeded) },
			err: ledger.ErrInvalidDelivery},
		{name: "a delivery with runtime evidence is refused", setup: claimed("a"),
			d: func(r rows) ledger.Delivery {
				d := byLocalID(r["a"], "evt_1", evSucceeded)
				d.Evidence.Source = ledger.SourceRuntime
				return d
			},
			err: ledger.ErrInvalidDelivery},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			r := tc.setup(e)
			if tc.prior != nil {
				for _, d := range tc.prior(r) {
					if _, err := e.s.Ingest(e.ctx, d); err != nil {
						t.Fatalf("prior Ingest: %v", err)
					}
				}
			}
			before := map[string]ledger.Row{}
			for n, row := range r {
				before[n] = e.get(row.Tenant, row.Key)
			}
			outboxBefore := len(e.pending())
			d := tc.d(r)
			res, err := e.s.Ingest(e.ctx, d)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Ingest: got %v, want %v", err, tc.err)
				}
			} else if err != nil {
				t.Fatalf("Ingest: %v", err)
			}
			if res.Outcome != tc.outcome {
				t.Fatalf("Ingest: got outcome %q, want %q", res.Outcome, tc.outcome)
			}
			if !slices.Equal(res.Change.Alerts, tc.alerts) {
				t.Fatalf("Ingest alerts: got %v, want %v", res.Change.Alerts, tc.alerts)
			}
			for n, b := range before {
				got := e.get(b.Tenant, b.Key)
				if n != tc.joined {
					sameRow(t, "row "+n+", which the event did not join", got, b)
					continue
				}
				if res.Row == nil {
					t.Fatal("Ingest: accepted without a row")
				}
				sameRow(t, "stored row vs the ingest result", got, *res.Row)
				if got.Status != tc.status || got.UpstreamReceiptID != "pi_1" {
					t.Fatalf("joined row: status %s receipt %q, want %s pi_1", got.Status, got.UpstreamReceiptID, tc.status)
				}
				if !got.Status.Open() && (got.Resolution == nil || got.Resolution.Source != ledger.SourceWebhook || got.Resolution.VendorEventID != d.EventID) {
					t.Fatalf("joined row resolution: %+v", got.Resolution)
				}
			}
			if tc.joined == "" && res.Row != nil {
				t.Fatalf("Ingest: got row %s, want none", res.Row.Key)
			}
			outbox := e.pending()
			if got := len(outbox) - outboxBefore; got != tc.events {
				t.Fatalf("outbox: got %d new records, want %d", got, tc.events)
			}
			if tc.events == 1 {
				ev := outbox[len(outbox)-1].Event
				if ev.Source != ledger.SourceWebhook || ev.VendorEventID != d.EventID || ev.Key != r[tc.joined].Key {
					t.Fatalf("outbox event: %+v", ev)
				}
			}
			if tc.err == nil {
				// Whatever the outcome, the event id is now remembered.
				again, err := e.s.Ingest(e.ctx, d)
				if err != nil || again.Outcome != ledger.IngestDuplicate || again.Row != nil {
					t.Fatalf("redelivery: got %q err %v, want duplicate", again.Outcome, err)
				}
				if got := len(e.pending()); got != len(outbox) {
					t.Fatalf("outbox: a duplicate wrote %d records", got-len(outbox))
				}
			}
			e.consistent()
		})
	}
}

// testOrphanClaims: a webhook can beat the runtime's own claim; the claim
// must then apply what the webhook said instead of calling the vendor.
func testOrphanClaims(t *testing.T, open Open) {
	future := newClaim(t, baseRequest(), t0).Row // the row the claim will insert
	park := func(tenant, eventID string, ev ledger.Evidence) ledger.Delivery {
		d := delivery(tenant, eventID, -time.Minute, ev)
		d.LocalID = future.MetadataLocalID
		return d
	}
	cases := []struct {
		name       string
		orphans    []ledger.Delivery
		freezeOnce bool // a frozen claim comes first and must leave the orphans parked
		// want
		decision ledger.Decision
		code     string
		status   ledger.Status
		receipt  string
		changes  int // orphan changes reported by the claim
		foreign  int // foreign_tenant alerts among them
		events   int
	}{
		{name: "success parked before the claim makes it replay",
			orphans:  []ledger.Delivery{park(tenantA, "evt_1", evSucceeded)},
			decision: ledger.DecisionReplay, status: ledger.StatusSucceeded, receipt: "pi_1", changes: 1, events: 1},
		{name: "failure parked before the claim makes it stop",
			orphans:  []ledger.Delivery{park(tenantA, "evt_1", evFailed)},
			decision: ledger.DecisionStop, code: ledger.CodeFailedPoison, status: ledger.StatusFailedPoison, receipt: "pi_1", changes: 1, events: 1},
		{name: "progress parked before the claim keeps proceed and stores the receipt",
			orphans:  []ledger.Delivery{park(tenantA, "evt_1", evProgress)},
			decision: ledger.DecisionProceed, status: ledger.StatusPending, receipt: "pi_1", changes: 1},
		{name: "two orphans apply oldest first (the first receipt sticks)",
			orphans:  []ledger.Delivery{park(tenantA, "evt_1", evProgress), park(tenantA, "evt_2", receipt(evSucceeded, "pi_2"))},
			decision: ledger.DecisionReplay, status: ledger.StatusSucceeded, receipt: "pi_1", changes: 2, events: 1},
		{name: "an orphan at another tenant's endpoint is not applied but alerts",
			orphans:  []ledger.Delivery{park(tenantB, "evt_1", evSucceeded)},
			decision: ledger.DecisionProceed, status: ledger.StatusPending, changes: 1, foreign: 1},
		{name: "a frozen claim leaves the orphan parked for the next claim",
			orphans: []ledger.Delivery{park(tenantA, "evt_1", evSucceeded)}, freezeOnce: true,
			decision: ledger.DecisionReplay, status: ledger.StatusSucceeded, receipt: "pi_1", changes: 1, events: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			for _, d := range tc.orphans {
				res, err := e.s.Ingest(e.ctx, d)
				if err != nil || res.Outcome != ledger.IngestOrphan {
					t.Fatalf("Ingest: got %q err %v, want orphan", res.Outcome, err)
				}
			}
			e.mustNotExist(future.Tenant, future.Key)
			if tc.freezeOnce {
				res := e.claim(baseRequest(frozen()), t0)
				if res.Decision != ledger.DecisionStop || res.Code != ledger.CodeToolFrozen {
					t.Fatalf("frozen claim: got %s %q", res.Decision, res.Code)
				}
				e.mustNotExist(future.Tenant, future.Key)
			}
			res := e.claim(baseRequest(), t0)
			if res.Decision != tc.decision || res.Code != tc.code || !res.Inserted {
				t.Fatalf("Claim: got %s %q inserted %v, want %s %q inserted", res.Decision, res.Code, res.Inserted, tc.decision, tc.code)
			}
			if len(res.Changes) != tc.changes {
				t.Fatalf("Claim: got %d orphan changes, want %d", len(res.Changes), tc.changes)
			}
			foreign := 0
			for _, ch := range res.Changes {
				for _, a := range ch.Alerts {
					if a == ledger.AlertForeignTenant {
						foreign++
					}
				}
			}
			if foreign != tc.foreign {
				t.Fatalf("Claim: got %d foreign_tenant alerts, want %d", foreign, tc.foreign)
			}
			stored := e.get(future.Tenant, future.Key)
			sameRow(t, "stored row vs claim result", stored, res.Row)
			if stored.Status != tc.status || stored.UpstreamReceiptID != tc.receipt {
				t.Fatalf("row: status %s receipt %q, want %s %q", stored.Status, stored.UpstreamReceiptID, tc.status, tc.receipt)
			}
			if got := len(e.pending()); got != tc.events {
				t.Fatalf("outbox: got %d records, want %d", got, tc.events)
			}
			// The orphans are consumed: their ids are remembered, and a
			// second claim applies nothing again.
			for _, d := range tc.orphans {
				again, err := e.s.Ingest(e.ctx, d)
				if err != nil || again.Outcome != ledger.IngestDuplicate {
					t.Fatalf("redelivery of %s: got %q err %v, want duplicate", d.EventID, again.Outcome, err)
				}
			}
			second, err := e.s.Claim(e.ctx, newClaim(t, baseRequest(), at(time.Second)))
			if err != nil || second.Inserted || len(second.Changes) != 0 {
				t.Fatalf("second claim: inserted %v changes %d err %v", second.Inserted, len(second.Changes), err)
			}
			e.consistent()
		})
	}
}

func testPruneInbox(t *testing.T, open Open) {
	// Deliveries first seen at t0, t0+1h and t0+2h; each kind of outcome is
	// remembered, so each must be pruned by age alone.
	events := []struct {
		id   string
		seen time.Duration
		kind string
	}{
		{"evt_unmatched", 0, "unmatched"},
		{"evt_ignored", time.Hour, "ignored"},
		{"evt_orphan", time.Hour, "orphan"},
		{"evt_accepted", 2 * time.Hour, "accepted"},
	}
	build := func(e *env, id string, seen time.Duration, kind string, row ledger.Row) ledger.Delivery {
		d := delivery(tenantA, id, seen, evProgress)
		switch kind {
		case "unmatched":
		case "ignored":
			d.Ignore, d.Evidence = true, ledger.Evidence{}
		case "orphan":
			d.LocalID = ledger.LocalIDPrefix + "ffffffffffffffffffffffffffffffff"
		case "accepted":
			d.LocalID = row.MetadataLocalID
		}
		return d
	}
	cases := []struct {
		name    string
		cutoff  time.Duration
		removed int
	}{
		{name: "cutoff before everything removes nothing", cutoff: -time.Second, removed: 0},
		{name: "cutoff at the oldest keeps it (strictly before)", cutoff: 0, removed: 0},
		{name: "cutoff after the oldest removes only it", cutoff: time.Second, removed: 1},
		{name: "cutoff at one hour keeps the one-hour entries", cutoff: time.Hour, removed: 1},
		{name: "cutoff past one hour removes three", cutoff: time.Hour + time.Microsecond, removed: 3},
		{name: "cutoff past everything removes all", cutoff: 7 * 24 * time.Hour, removed: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			row := e.claim(baseRequest(), t0).Row
			for _, ev := range events {
				if _, err := e.s.Ingest(e.ctx, build(e, ev.id, ev.seen, ev.kind, row)); err != nil {
					t.Fatalf("Ingest %s: %v", ev.id, err)
				}
			}
			n, err := e.s.PruneInbox(e.ctx, at(tc.cutoff))
			if err != nil || n != tc.removed {
				t.Fatalf("PruneInbox: got %d err %v, want %d", n, err, tc.removed)
			}
			if n, err := e.s.PruneInbox(e.ctx, at(tc.cutoff)); err != nil || n != 0 {
				t.Fatalf("PruneInbox again: got %d err %v, want 0", n, err)
			}
			e.consistent()
			for _, ev := range events {
				kept := !at(ev.seen).Before(at(tc.cutoff))
				res, err := e.s.Ingest(e.ctx, build(e, ev.id, 3*time.Hour, ev.kind, row))
				if err != nil {
					t.Fatalf("redeliver %s: %v", ev.id, err)
				}
				if got := res.Outcome == ledger.IngestDuplicate; got != kept {
					t.Fatalf("redeliver %s: got %q, want duplicate=%v", ev.id, res.Outcome, kept)
				}
			}
		})
	}
}

func testEscalate(t *testing.T, open Open) {
	cases := []struct {
		name  string
		start []ledger.Outcome
		// want
		paged bool
	}{
		{name: "pending is paged once", paged: true},
		{name: "unknown is paged once", start: []ledger.Outcome{timeout(time.Second)}, paged: true},
		{name: "succeeded is never paged", start: []ledger.Outcome{response(200, "pi_1", time.Second)}},
		{name: "failed_poison is never paged", start: []ledger.Outcome{response(400, "", time.Second)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			before := seed(nil, tc.start...)(e)
			outboxBefore := len(e.pending())
			pagedAt := at(25 * time.Hour)
			row, ok, err := e.s.Escalate(e.ctx, before.Tenant, before.Key, pagedAt)
			if err != nil || ok != tc.paged {
				t.Fatalf("Escalate: got %v err %v, want %v", ok, err, tc.paged)
			}
			stored := e.get(before.Tenant, before.Key)
			sameRow(t, "stored row vs escalate result", stored, row)
			want := before.Clone()
			if tc.paged {
				want.PagedAt, want.UpdatedAt = pagedAt, pagedAt
			}
			sameRow(t, "escalated row", stored, want)
			outbox := e.pending()
			wantEvents := 0
			if tc.paged {
				wantEvents = 1
				ev := outbox[len(outbox)-1].Event
				if ev.Status != ledger.EventEscalated || ev.Key != before.Key || ev.Source != ledger.SourceResolver || !ev.At.Equal(pagedAt) {
					t.Fatalf("escalated event: %+v", ev)
				}
			}
			if got := len(outbox) - outboxBefore; got != wantEvents {
				t.Fatalf("outbox: got %d records, want %d", got, wantEvents)
			}
			// Once: a second escalation changes nothing and writes nothing.
			row2, ok, err := e.s.Escalate(e.ctx, before.Tenant, before.Key, at(26*time.Hour))
			if err != nil || ok {
				t.Fatalf("second Escalate: got %v err %v, want false", ok, err)
			}
			sameRow(t, "row after a second escalation", row2, stored)
			sameRow(t, "stored row after a second escalation", e.get(before.Tenant, before.Key), stored)
			if got := len(e.pending()); got != len(outbox) {
				t.Fatalf("outbox: a second escalation wrote %d records", got-len(outbox))
			}
			e.consistent()
		})
	}
	t.Run("missing row is not found", func(t *testing.T) {
		e := newEnv(t, open)
		if _, _, err := e.s.Escalate(e.ctx, tenantA, "no-such-key", t0); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Escalate: got %v, want ErrNotFound", err)
		}
	})
}

func testReschedule(t *testing.T, open Open) {
	cases := []struct {
		name  string
		start []ledger.Outcome
		next  time.Duration
		// want
		moved bool
	}{
		{name: "pending moves later", next: time.Hour, moved: true},
		{name: "unknown moves earlier", start: []ledger.Outcome{timeout(time.Second)}, next: 10 * time.Second, moved: true},
		{name: "succeeded is left alone", start: []ledger.Outcome{response(200, "pi_1", time.Second)}, next: time.Hour},
		{name: "failed_poison is left alone", start: []ledger.Outcome{response(400, "", time.Second)}, next: time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			before := seed(nil, tc.start...)(e)
			outboxBefore := len(e.pending())
			if err := e.s.Reschedule(e.ctx, before.Tenant, before.Key, at(tc.next)); err != nil {
				t.Fatalf("Reschedule: %v", err)
			}
			want := before.Clone()
			if tc.moved {
				want.NextCheckAt = at(tc.next)
			}
			sameRow(t, "rescheduled row", e.get(before.Tenant, before.Key), want)
			if got := len(e.pending()); got != outboxBefore {
				t.Fatalf("outbox: Reschedule wrote %d records", got-outboxBefore)
			}
			// The due index follows: due at next, not a microsecond before.
			due := func(now time.Time) bool {
				rows, err := e.s.Due(e.ctx, now, 10)
				if err != nil {
					t.Fatalf("Due: %v", err)
				}
				return len(rows) == 1 && rows[0].Key == before.Key
			}
			if tc.moved && (!due(at(tc.next)) || due(at(tc.next-time.Microsecond))) {
				t.Fatalf("Due does not follow the new next_check_at %v", at(tc.next))
			}
			if !tc.moved && due(at(1000*time.Hour)) {
				t.Fatal("a settled row is due")
			}
			e.consistent()
		})
	}
	t.Run("the zero time makes an open row due now, not never", func(t *testing.T) {
		e := newEnv(t, open)
		row := seed(nil)(e)
		if err := e.s.Reschedule(e.ctx, row.Tenant, row.Key, time.Time{}); err != nil {
			t.Fatalf("Reschedule: %v", err)
		}
		rows, err := e.s.Due(e.ctx, t0, 10)
		if err != nil || len(rows) != 1 || rows[0].Key != row.Key {
			t.Fatalf("Due after a reschedule to the zero time: %d rows, %v", len(rows), err)
		}
		e.consistent()
	})
	t.Run("missing row is not found", func(t *testing.T) {
		e := newEnv(t, open)
		if err := e.s.Reschedule(e.ctx, tenantA, "no-such-key", t0); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Reschedule: got %v, want ErrNotFound", err)
		}
	})
}
