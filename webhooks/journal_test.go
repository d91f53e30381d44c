package webhooks_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

// TestDeliveriesThatChangeNothingAreJournalled: the second delivery of a
// Stripe event (a duplicate) leaves a journal entry on its row with the
// vendor event id and how it was verified; the first, which settled the
// row, leaves none (its event on the stream says it).
func TestDeliveriesThatChangeNothingAreJournalled(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	row := hs.claim("acme", "run-1", nil)
	body := stripePayload(t, "stripe/2024-06-20/payment_intent.succeeded", row.MetadataLocalID, "")
	for range 2 {
		if rec := hs.post("/webhooks/stripe/default", body, stripeHeader(body, t0, stripeSecret)); rec.Code != http.StatusOK {
			t.Fatalf("status %d %s", rec.Code, rec.Body)
		}
	}
	j, err := hs.store.RowJournal(context.Background(), row.Tenant, row.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(j) != 1 || j[0].Kind != ledger.JournalWebhook || j[0].Outcome != ledger.NoteDuplicate {
		t.Fatalf("journal = %+v, want one duplicate delivery", j)
	}
	if j[0].VendorEventID == "" || !strings.Contains(j[0].Verified, "endpoint default (stripe)") {
		t.Fatalf("entry = %+v: want the vendor event id and the verifying endpoint", j[0])
	}
}
