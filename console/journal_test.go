package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/console"
	"github.com/agentledger/reconciler/ledger"
)

// TestTimelineShowsTheJournal: the row page's timeline shows what the row's
// journal keeps — the resolver's findings, why the row was paged, and a
// webhook delivery that changed nothing with its vendor event id and how it
// was verified — in time order, among the row's own entries.
func TestTimelineShowsTheJournal(t *testing.T) {
	f := newFixture(t, func(o *console.Options) {
		o.Verification = map[string]string{"stripe": "Stripe-Signature, HMAC-SHA256"}
	})
	key := f.claim(acmeToken, `{"run_id": "run_j", "tool": "stripe.charge", "tool_call_id": "call_j", "vendor": "stripe",
		"tool_class": "write_idempotent", "intent": {"amount": 1}}`, http.StatusCreated)
	if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+key+"/outcome", `{"kind": "timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome: %d %v", code, out)
	}
	row := f.row("acme", key)
	ctx := context.Background()
	now := f.clock.Now()
	finding := func(outcome, detail string, d time.Duration) ledger.JournalEntry {
		return ledger.JournalEntry{Kind: ledger.JournalResolver, Outcome: outcome, Detail: detail, At: now.Add(d)}
	}
	if err := f.store.Reschedule(ledger.WithJournal(ctx, finding(ledger.NoteNotFound, "search by local id "+row.MetadataLocalID+": nothing found", time.Minute)),
		"acme", key, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	page := ledger.JournalEntry{Kind: ledger.JournalPage, Outcome: ledger.NotePaged, Detail: "still unknown after the replay window", At: now.Add(2 * time.Minute)}
	if _, ok, err := f.store.Escalate(ledger.WithJournal(ctx, finding(ledger.NoteWindowExpired, "", 2*time.Minute), page), "acme", key, now.Add(2*time.Minute)); err != nil || !ok {
		t.Fatalf("escalate: %v %v", ok, err)
	}
	d := ledger.Delivery{Tenant: "acme", Vendor: "stripe", EventID: "evt_dup_9", LocalID: row.MetadataLocalID, At: now.Add(3 * time.Minute),
		Verified: "signature checked by endpoint main (stripe)",
		Evidence: ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusFailedPoison, VendorEventID: "evt_dup_9", At: now.Add(3 * time.Minute)}}
	for range 2 {
		if _, err := f.store.Ingest(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	b := f.browser()
	b.signIn(acmeApprover, "erin")
	body := b.get(rowPath("acme", key)).Body
	wants := []string{
		"Resolver lookup: found nothing", "search by local id " + row.MetadataLocalID,
		"Resolver: the replay window has expired",
		"Paged a person", "why: still unknown after the replay window",
		"Webhook delivery → failed_poison",
		"Webhook delivery: a duplicate, changed nothing", "vendor event evt_dup_9",
		"verified: signature checked by endpoint main (stripe); Stripe-Signature, HMAC-SHA256",
	}
	mustContain(t, "row page", body, wants...)
	order := []string{"Resolver lookup: found nothing", "Resolver: the replay window has expired", "Paged a person",
		"Webhook delivery → failed_poison", "Webhook delivery: a duplicate, changed nothing"}
	for i := 1; i < len(order); i++ {
		if strings.Index(body, order[i-1]) > strings.Index(body, order[i]) {
			t.Fatalf("timeline order: %q after %q", order[i-1], order[i])
		}
	}
}

// slowFinder answers only when its context is done, as a scan of a huge
// tenant would.
type slowFinder struct{}

func (slowFinder) FindRows(ctx context.Context, _ ledger.FindQuery) (ledger.Found, error) {
	<-ctx.Done()
	return ledger.Found{}, ctx.Err()
}

// TestSearchIsComplete: a search by tool call id, receipt id or local id
// finds a row past the newest ScanLimit rows through the store's Finder
// (without one, the page says it looked among the newest only), and a
// search the deadline cuts says so.
func TestSearchIsComplete(t *testing.T) {
	cases := []struct {
		name  string
		opt   fixtureOption
		found bool
		note  string
	}{
		{"finder", func(o *console.Options) { o.ScanLimit = 3 }, true, ""},
		{"no finder", func(o *console.Options) { o.ScanLimit = 3; o.Finder = nil }, false, "among the newest 3 rows only"},
		{"deadline", func(o *console.Options) { o.Finder = slowFinder{}; o.SearchTimeout = 50 * time.Millisecond }, false, "stopped at its deadline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opt)
			var first string
			for i := range 6 {
				k := f.claim(acmeToken, fmt.Sprintf(`{"run_id": "run_s%d", "tool": "stripe.charge", "tool_call_id": "call_s%d", "vendor": "stripe",
					"tool_class": "write_idempotent", "intent": {"n": %d}}`, i, i, i), http.StatusCreated)
				if i == 0 {
					first = k
				}
				f.clock.Advance(time.Second)
			}
			if code, out := f.apiCall(acmeToken, http.MethodPost, "/v1/claims/"+first+"/outcome", `{"kind": "response", "http_status": 200, "receipt_id": "pi_first"}`); code != http.StatusOK {
				t.Fatalf("outcome: %d %v", code, out)
			}
			b := f.browser()
			b.signIn(adminToken, "alice")
			for q, match := range map[string]string{"call_s0": "tool call id", "pi_first": "receipt id", f.row("acme", first).MetadataLocalID: "local id"} {
				body := b.get("/console/search?" + url.Values{"tenant": {"acme"}, "q": {q}}.Encode()).Body
				if got := strings.Contains(body, "key="+first) && strings.Contains(body, "matched on "+match); got != tc.found {
					t.Fatalf("search %s: found %v, want %v:\n%s", q, got, tc.found, body)
				}
				if tc.note != "" {
					mustContain(t, "search "+q, body, tc.note)
				}
			}
		})
	}
}
