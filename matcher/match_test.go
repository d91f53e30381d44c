package matcher_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/matcher"
)

var (
	created  = time.Date(2026, 3, 1, 11, 59, 58, 0, time.UTC)
	received = time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
)

func amount(v int64) *int64 { return &v }

func stripeEvent(typ string) matcher.Event {
	return matcher.Event{
		Vendor: "stripe", ID: "evt_1", Type: typ, ObjectID: "pi_1", LocalID: "rl_0123",
		IdempotencyKey: "k1", Amount: amount(1050), Currency: "USD", Created: created, Received: received,
	}
}

func TestMatch(t *testing.T) {
	table := matcher.DefaultTable()
	tests := []struct {
		name       string
		ev         matcher.Event
		wantIgnore bool
		wantStatus ledger.Status
	}{
		{"stripe succeeded", stripeEvent("payment_intent.succeeded"), false, ledger.StatusSucceeded},
		{"stripe charge succeeded", stripeEvent("charge.succeeded"), false, ledger.StatusSucceeded},
		{"stripe refund created", stripeEvent("refund.created"), false, ledger.StatusSucceeded},
		{"stripe customer created", stripeEvent("customer.created"), false, ledger.StatusSucceeded},
		{"stripe failed", stripeEvent("payment_intent.payment_failed"), false, ledger.StatusFailedPoison},
		{"stripe charge failed", stripeEvent("charge.failed"), false, ledger.StatusFailedPoison},
		{"stripe progress", stripeEvent("payment_intent.processing"), false, ""},
		{"stripe requires action", stripeEvent("payment_intent.requires_action"), false, ""},
		{"stripe unknown type", stripeEvent("charge.dispute.created"), true, ""},
		{"paypal completed", matcher.Event{Vendor: "paypal", ID: "WH-1", Type: "PAYMENT.CAPTURE.COMPLETED", Received: received}, false, ledger.StatusSucceeded},
		{"paypal denied", matcher.Event{Vendor: "paypal", ID: "WH-2", Type: "PAYMENT.CAPTURE.DENIED", Received: received}, false, ledger.StatusFailedPoison},
		{"resend sent", matcher.Event{Vendor: "resend", ID: "msg_1", Type: "email.sent", Received: received}, false, ledger.StatusSucceeded},
		{"resend bounced", matcher.Event{Vendor: "resend", ID: "msg_2", Type: "email.bounced", Received: received}, false, ledger.StatusFailedPoison},
		{"resend opened", matcher.Event{Vendor: "resend", ID: "msg_3", Type: "email.opened", Received: received}, true, ""},
		{"unknown vendor", matcher.Event{Vendor: "acme", ID: "e1", Type: "email.sent", Received: received}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := matcher.Match("acme", tt.ev, table)
			// MatchAction with the table's action builds the same delivery.
			if got := matcher.MatchAction("acme", tt.ev, table.Lookup(tt.ev.Vendor, tt.ev.Type)); !reflect.DeepEqual(got, d) {
				t.Fatalf("MatchAction = %+v, Match = %+v", got, d)
			}
			if got, want := d.Ignore, tt.wantIgnore; got != want {
				t.Fatalf("Ignore = %v, want %v", got, want)
			}
			if d.Tenant != "acme" || d.Vendor != tt.ev.Vendor || d.EventID != tt.ev.ID ||
				d.LocalID != tt.ev.LocalID || d.IdempotencyKey != tt.ev.IdempotencyKey {
				t.Errorf("delivery ids = %+v, want them copied from %+v", d, tt.ev)
			}
			if got, want := d.At, received.UTC(); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("At = %v, want %v in UTC", got, want)
			}
			if err := d.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tt.wantIgnore {
				if d.Evidence != (ledger.Evidence{}) {
					t.Errorf("ignored delivery carries evidence %+v", d.Evidence)
				}
				return
			}
			ev := d.Evidence
			if ev.Source != ledger.SourceWebhook || ev.Status != tt.wantStatus {
				t.Errorf("evidence source/status = %s/%q, want webhook/%q", ev.Source, ev.Status, tt.wantStatus)
			}
			if ev.ReceiptID != tt.ev.ObjectID || ev.VendorEventID != tt.ev.ID || !ev.At.Equal(received) {
				t.Errorf("evidence = %+v, want receipt %q, event %q", ev, tt.ev.ObjectID, tt.ev.ID)
			}
			if tt.ev.Amount != nil && (ev.Amount == nil || *ev.Amount != *tt.ev.Amount || ev.Amount == tt.ev.Amount) {
				t.Errorf("evidence amount = %v, want a copy of %d", ev.Amount, *tt.ev.Amount)
			}
			if ev.Currency != "" && ev.Currency != "usd" {
				t.Errorf("currency = %q, want lower case", ev.Currency)
			}
		})
	}
}

func TestMatchFallsBackToCreated(t *testing.T) {
	ev := stripeEvent("payment_intent.succeeded")
	ev.Received = time.Time{}
	d := matcher.Match("acme", ev, matcher.DefaultTable())
	if !d.At.Equal(created) || !d.Evidence.At.Equal(created) {
		t.Fatalf("At = %v / %v, want the event's created time %v", d.At, d.Evidence.At, created)
	}
}

func TestNewTable(t *testing.T) {
	tests := []struct {
		name    string
		extra   map[string]map[string]matcher.Action
		vendor  string
		typ     string
		want    matcher.Action
		wantErr bool
	}{
		{"defaults kept", nil, "stripe", "payment_intent.succeeded", matcher.Succeeded, false},
		{"new type", map[string]map[string]matcher.Action{"stripe": {"x.y": matcher.Progress}}, "stripe", "x.y", matcher.Progress, false},
		{"override default", map[string]map[string]matcher.Action{"stripe": {"charge.succeeded": matcher.Ignore}}, "stripe", "charge.succeeded", matcher.Ignore, false},
		{"new vendor", map[string]map[string]matcher.Action{"postmark": {"Delivery": matcher.Succeeded}}, "postmark", "Delivery", matcher.Succeeded, false},
		{"unknown type ignored", nil, "stripe", "nope", matcher.Ignore, false},
		{"invalid action", map[string]map[string]matcher.Action{"stripe": {"x.y": "yes"}}, "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := matcher.NewTable(tt.extra)
			if tt.wantErr {
				if err == nil {
					t.Fatal("NewTable accepted an invalid action")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := table.Lookup(tt.vendor, tt.typ); got != tt.want {
				t.Errorf("Lookup(%s, %s) = %q, want %q", tt.vendor, tt.typ, got, tt.want)
			}
		})
	}
	t.Run("defaults are not shared", func(t *testing.T) {
		a := matcher.DefaultTable()
		a.Set("stripe", "payment_intent.succeeded", matcher.Ignore)
		if got := matcher.DefaultTable().Lookup("stripe", "payment_intent.succeeded"); got != matcher.Succeeded {
			t.Fatalf("changing one table changed the defaults: %q", got)
		}
	})
}

func TestParseAction(t *testing.T) {
	for _, s := range []string{"succeeded", "failed", "progress", "ignore"} {
		t.Run(s, func(t *testing.T) {
			if a, err := matcher.ParseAction(s); err != nil || string(a) != s {
				t.Fatalf("ParseAction(%q) = %q, %v", s, a, err)
			}
		})
	}
	for _, s := range []string{"", "Succeeded", "failed_poison", "yes"} {
		t.Run("bad "+s, func(t *testing.T) {
			if _, err := matcher.ParseAction(s); err == nil {
				t.Fatalf("ParseAction(%q) accepted", s)
			}
		})
	}
}

// TestMatchThroughStore checks that what Match builds is what the ledger's
// flow accepts and applies: a progress event stores the receipt only, a
// success then settles the row, and a second event id for the same object
// changes nothing.
func TestMatchThroughStore(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{"amount":1050}`),
		Expect: &ledger.Expect{Amount: 1050, Currency: "usd"},
	}, ledger.DefaultPolicy(), created)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, c); err != nil {
		t.Fatal(err)
	}
	table := matcher.DefaultTable()
	steps := []struct {
		name       string
		id, typ    string
		wantStatus ledger.Status
		wantEvents int
	}{
		{"progress", "evt_a", "payment_intent.processing", ledger.StatusPending, 0},
		{"succeeded", "evt_b", "payment_intent.succeeded", ledger.StatusSucceeded, 1},
		{"second event for the object", "evt_c", "charge.succeeded", ledger.StatusSucceeded, 1},
		{"late failure", "evt_d", "payment_intent.payment_failed", ledger.StatusSucceeded, 1},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			ev := stripeEvent(s.typ)
			ev.ID, ev.LocalID = s.id, c.Row.MetadataLocalID
			res, err := st.Ingest(ctx, matcher.Match("acme", ev, table))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != ledger.IngestAccepted {
				t.Fatalf("outcome = %s, want accepted", res.Outcome)
			}
			row, err := st.Get(ctx, "acme", c.Row.Key)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != s.wantStatus || row.UpstreamReceiptID != "pi_1" {
				t.Errorf("row = %s receipt %q, want %s receipt pi_1", row.Status, row.UpstreamReceiptID, s.wantStatus)
			}
			evs, err := st.PendingEvents(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != s.wantEvents {
				t.Errorf("outbox holds %d records, want %d", len(evs), s.wantEvents)
			}
		})
	}
}

// TestMatchDropsWhatNoRowCouldHold: a local id, echoed key or object id
// that is not 1–255 printable ASCII joins no row; it is dropped, and the
// delivery stays valid, so the webhook is acknowledged instead of refused.
func TestMatchDropsWhatNoRowCouldHold(t *testing.T) {
	long := strings.Repeat("x", ledger.MaxKeyLen+1)
	tests := []struct {
		name  string
		typ   string
		field func(*matcher.Event, string)
		value string
	}{
		{"free-text custom_id", "payment_intent.succeeded", func(e *matcher.Event, v string) { e.LocalID = v }, "Order 1234"},
		{"non-ASCII local id on an ignored type", "charge.dispute.created", func(e *matcher.Event, v string) { e.LocalID = v }, "réf-42"},
		{"over-long echoed key", "payment_intent.succeeded", func(e *matcher.Event, v string) { e.IdempotencyKey = v }, long},
		{"control character in the object id", "payment_intent.succeeded", func(e *matcher.Event, v string) { e.ObjectID = v }, "pi_1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := stripeEvent(tt.typ)
			tt.field(&ev, tt.value)
			d := matcher.Match("acme", ev, matcher.DefaultTable())
			if err := d.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			for _, got := range []string{d.LocalID, d.IdempotencyKey, d.Evidence.ReceiptID} {
				if got == tt.value {
					t.Fatalf("%q reached the delivery: %+v", tt.value, d)
				}
			}
		})
	}
}
