package presets_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/fakemailgun"
	"github.com/agentledger/reconciler/ledger"
)

// mailgunRequest is a send as the runtime makes it: a form with the local
// id as the variable v:metadata_local_id.
func mailgunRequest(localID string) *ledger.Request {
	f := url.Values{"from": {"a@mg.example.com"}, "to": {"b@example.com"}, "subject": {"hi"}, "text": {"hi"}, "v:metadata_local_id": {localID}}
	return &ledger.Request{Method: "POST", Path: "/messages", ContentType: "application/x-www-form-urlencoded", Body: f.Encode()}
}

func TestMailgun(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakemailgun.Server) {
		c := newClock()
		f := fakemailgun.New("mg.example.com", apiKey, c.Now)
		f.Lag = 2 * time.Minute
		t.Cleanup(f.Close)
		// The test does not wait on the preset's pace (2/s).
		return newEnv(t, c, "mailgun", f.APIBase(), "    rate_limit: 1000/s\n"), f
	}
	t.Run("an accepted message is found among other events, across pages", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		f.Noise(450) // a busy domain: the lookup pages past them
		e.send(row, f.APIBase(), mailgunRequest(row.MetadataLocalID))
		f.Noise(200)
		e.timedOut(row)
		e.pass(time.Minute) // not listed yet, younger than min_age
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		calls := f.EventCalls()
		e.pass(5 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if !strings.HasSuffix(got.UpstreamReceiptID, "@mg.example.com") || e.pager.count() != 0 {
			t.Errorf("receipt %q, pages %d", got.UpstreamReceiptID, e.pager.count())
		}
		if n := f.EventCalls() - calls; n < 3 {
			t.Errorf("%d events calls, want the pages of 650+ events (3 of 300)", n)
		}
	})
	t.Run("accepted then delivered is one message, succeeded", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		f.Add("m1@mg.example.com", row.MetadataLocalID, "accepted", "")
		f.Add("m1@mg.example.com", row.MetadataLocalID, "delivered", "")
		e.timedOut(row)
		e.pass(6 * time.Minute)
		wantStatus(t, e.row(row.Key), ledger.StatusSucceeded)
	})
	t.Run("a rejected message fails the row", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		f.Add("m2@mg.example.com", row.MetadataLocalID, "rejected", "")
		e.timedOut(row)
		e.pass(6 * time.Minute)
		wantStatus(t, e.row(row.Key), ledger.StatusFailedPoison)
	})
	t.Run("two messages with one local id page at once", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		e.send(row, f.APIBase(), mailgunRequest(row.MetadataLocalID))
		e.send(row, f.APIBase(), mailgunRequest(row.MetadataLocalID))
		e.timedOut(row)
		e.pass(6 * time.Minute)
		if e.pager.count() != 1 || !strings.Contains(e.pager.last(), "duplicate") {
			t.Fatalf("pages %d (%q), want one naming the duplicate", e.pager.count(), e.pager.last())
		}
	})
	t.Run("more pages than max_pages is inconclusive, not absence", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		f.Noise(300 * 21)
		e.timedOut(row)
		e.pass(6 * time.Minute)
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		if e.pager.count() != 0 {
			t.Errorf("paged %q on an inconclusive lookup", e.pager.last())
		}
	})
	t.Run("absent after min_age pages once", func(t *testing.T) {
		e, _ := setup(t)
		row := e.claim(`{"to":"b@example.com"}`, nil)
		e.timedOut(row)
		e.pass(6 * time.Minute)
		e.pass(2 * time.Hour)
		if e.pager.count() != 1 {
			t.Errorf("pages %d, want one", e.pager.count())
		}
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
	})
}
