package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/webhooks"
)

const piSucceeded = "stripe/2024-06-20/payment_intent.succeeded"

func TestStripeDelivery(t *testing.T) {
	tests := []struct {
		fixture    string
		wantStatus ledger.Status
	}{
		{"stripe/2024-06-20/payment_intent.succeeded", ledger.StatusSucceeded},
		{"stripe/2025-03-31.basil/payment_intent.succeeded", ledger.StatusSucceeded},
		{"stripe/2024-06-20/charge.succeeded", ledger.StatusSucceeded},
		{"stripe/2017-02-14/charge.succeeded", ledger.StatusSucceeded},
		{"stripe/2024-06-20/payment_intent.payment_failed", ledger.StatusFailedPoison},
		{"stripe/2025-03-31.basil/payment_intent.payment_failed", ledger.StatusFailedPoison},
		{"stripe/2024-06-20/refund.created", ledger.StatusSucceeded},
		{"stripe/2025-03-31.basil/customer.created", ledger.StatusSucceeded},
		{"stripe/2017-02-14/customer.created", ledger.StatusSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			hs := newHarness(t, defaultOptions())
			row := hs.claim("acme", "run-1", nil)
			body := stripePayload(t, tt.fixture, row.MetadataLocalID, "")
			for _, path := range []string{"/webhooks/stripe", "/webhooks/stripe/default"} {
				rec := hs.post(path, body, stripeHeader(body, t0, stripeSecret))
				if rec.Code != http.StatusOK {
					t.Fatalf("%s: status %d %s", path, rec.Code, rec.Body)
				}
			}
			got := hs.row(row)
			if got.Status != tt.wantStatus || got.UpstreamReceiptID == "" || got.Resolution == nil || got.Resolution.Source != ledger.SourceWebhook {
				t.Fatalf("row = %s receipt %q resolution %+v, want %s from a webhook", got.Status, got.UpstreamReceiptID, got.Resolution, tt.wantStatus)
			}
			if got, want := len(hs.outbox()), 1; got != want {
				t.Errorf("outbox holds %d records, want %d", got, want)
			}
			if got := hs.counter("reconciler_webhooks_total", "vendor", "stripe", "result", "accepted"); got != 1 {
				t.Errorf("accepted = %v, want 1", got)
			}
			if got := hs.counter("reconciler_webhooks_total", "vendor", "stripe", "result", "duplicate"); got != 1 {
				t.Errorf("duplicate = %v, want 1 (the same event on the named path)", got)
			}
			if got := hs.counter("reconciler_transitions_total", "from", "pending", "to", string(tt.wantStatus), "source", "webhook"); got != 1 {
				t.Errorf("transitions = %v, want 1", got)
			}
		})
	}
}

// TestRejected: every 400 and the 413 store nothing: no row changes, no
// outbox record, and the event id stays unknown to the inbox.
func TestRejected(t *testing.T) {
	type delivery struct {
		path   string
		body   []byte
		header http.Header
	}
	stripeBody := func(id string) []byte { return stripePayload(t, piSucceeded, "", id) }
	tests := []struct {
		name       string
		vendor     string
		eventID    string
		make       func(localID string) delivery
		wantStatus int
		wantCode   string
		wantResult string
	}{
		{"bad signature", "stripe", "evt_bad", func(lid string) delivery {
			b := stripePayload(t, piSucceeded, lid, "evt_bad")
			return delivery{"/webhooks/stripe", b, stripeHeader(b, t0, "whsec_wrong")}
		}, 400, "bad_signature", "bad_signature"},
		{"no signature", "stripe", "evt_nosig", func(lid string) delivery {
			return delivery{"/webhooks/stripe", stripePayload(t, piSucceeded, lid, "evt_nosig"), nil}
		}, 400, "bad_signature", "bad_signature"},
		{"stale", "stripe", "evt_stale", func(lid string) delivery {
			b := stripePayload(t, piSucceeded, lid, "evt_stale")
			return delivery{"/webhooks/stripe", b, stripeHeader(b, t0.Add(-6*time.Minute), stripeSecret)}
		}, 400, "stale", "stale"},
		{"future", "stripe", "evt_future", func(lid string) delivery {
			b := stripePayload(t, piSucceeded, lid, "evt_future")
			return delivery{"/webhooks/stripe", b, stripeHeader(b, t0.Add(6*time.Minute), stripeSecret)}
		}, 400, "stale", "stale"},
		{"unparsable header", "stripe", "evt_hdr", func(lid string) delivery {
			b := stripePayload(t, piSucceeded, lid, "evt_hdr")
			return delivery{"/webhooks/stripe", b, http.Header{"Stripe-Signature": {"t=now,v1=00"}}}
		}, 400, "unparsable", "unparsable"},
		{"unparsable body", "stripe", "evt_body", func(lid string) delivery {
			b := []byte(`{"id":"evt_body","type":"payment_intent.succeeded","data":`)
			return delivery{"/webhooks/stripe", b, stripeHeader(b, t0, stripeSecret)}
		}, 400, "unparsable", "unparsable"},
		{"event id too long", "stripe", strings.Repeat("e", 256), func(lid string) delivery {
			b := stripePayload(t, piSucceeded, lid, strings.Repeat("e", 256))
			return delivery{"/webhooks/stripe", b, stripeHeader(b, t0, stripeSecret)}
		}, 400, "invalid_delivery", "invalid"},
		{"too large", "stripe", "evt_large", func(lid string) delivery {
			b := stripeBody("evt_large")
			b = append(b[:len(b)-2], []byte(`,"pad":"`+strings.Repeat("x", 1<<20)+`"}`)...)
			return delivery{"/webhooks/stripe", b, stripeHeader(b, t0, stripeSecret)}
		}, 413, "body_too_large", "too_large"},
		{"standard bad signature", "resend", "msg_bad", func(lid string) delivery {
			b, _ := fixtures.Set(fixtures.Load("resend/email.sent"), "metadata_local_id", lid)
			return delivery{"/webhooks/standard", b, signStandard(t, "msg_bad", b, t0, "whsec_"+"b3RoZXItc2VjcmV0LW9mLTI0LWJ5dGVz")}
		}, 400, "bad_signature", "bad_signature"},
		{"standard stale", "resend", "msg_stale", func(lid string) delivery {
			b, _ := fixtures.Set(fixtures.Load("resend/email.sent"), "metadata_local_id", lid)
			return delivery{"/webhooks/standard/resend", b, signStandard(t, "msg_stale", b, t0.Add(-time.Hour), resendSecret)}
		}, 400, "stale", "stale"},
		{"standard unparsable body", "resend", "msg_body", func(lid string) delivery {
			b := []byte(`{"data":{}}`)
			return delivery{"/webhooks/standard/resend", b, signStandard(t, "msg_body", b, t0, resendSecret)}
		}, 400, "unparsable", "unparsable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, defaultOptions())
			row := hs.claim("acme", "run-1", nil)
			d := tt.make(row.MetadataLocalID)
			rec := hs.post(d.path, d.body, d.header)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d %s, want %d", rec.Code, rec.Body, tt.wantStatus)
			}
			if got := errorCode(t, rec); got != tt.wantCode {
				t.Errorf("code = %q, want %q", got, tt.wantCode)
			}
			if got := hs.counter("reconciler_webhooks_total", "vendor", tt.vendor, "result", tt.wantResult); got != 1 {
				t.Errorf("webhooks_total{%s,%s} = %v, want 1", tt.vendor, tt.wantResult, got)
			}
			if got := hs.row(row); got.Status != ledger.StatusPending || got.UpstreamReceiptID != "" {
				t.Errorf("row changed: %s %q", got.Status, got.UpstreamReceiptID)
			}
			if n := len(hs.outbox()); n != 0 {
				t.Errorf("outbox holds %d records", n)
			}
			if len(tt.eventID) <= 255 && hs.seen(tt.vendor, tt.eventID) {
				t.Errorf("the inbox recorded the rejected event %s", tt.eventID)
			}
		})
	}
}

// TestInvalidDeliveryMessage: a delivery the ledger refuses is answered with
// the ledger's own text, not with what the store wrapped around it.
func TestInvalidDeliveryMessage(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	row := hs.claim("acme", "run-1", nil)
	id := strings.Repeat("e", 256)
	b := stripePayload(t, piSucceeded, row.MetadataLocalID, id)
	rec := hs.post("/webhooks/stripe", b, stripeHeader(b, t0, stripeSecret))
	var body apierror.Body
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", rec.Body, err)
	}
	want := apierror.Detail{Code: "invalid_delivery", Message: "invalid delivery: event id must be 1-255 printable ASCII characters"}
	if rec.Code != http.StatusBadRequest || body.Error != want {
		t.Fatalf("answer = %d %+v, want 400 %+v", rec.Code, body.Error, want)
	}
}

func TestDuplicateConcurrent(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	row := hs.claim("acme", "run-1", &ledger.Expect{Amount: 1050, Currency: "usd"})
	body := stripePayload(t, piSucceeded, row.MetadataLocalID, "evt_dup")
	const n = 10
	codes := make(chan int, n)
	results := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each retry is re-signed at its own time, as Stripe does.
			at := t0.Add(-time.Duration(i) * time.Second)
			rec := hs.post("/webhooks/stripe/default", body, stripeHeader(body, at, stripeSecret))
			codes <- rec.Code
			if rec.Code == http.StatusOK {
				results <- result(t, rec)
			}
		}()
	}
	wg.Wait()
	close(codes)
	close(results)
	for c := range codes {
		if c != http.StatusOK {
			t.Fatalf("a delivery got %d, want every one 200", c)
		}
	}
	count := map[string]int{}
	for r := range results {
		count[r]++
	}
	if count["accepted"] != 1 || count["duplicate"] != n-1 {
		t.Errorf("results = %v, want 1 accepted and %d duplicate", count, n-1)
	}
	if got := hs.outbox(); len(got) != 1 || got[0].Event.Status != string(ledger.StatusSucceeded) || got[0].Event.VendorEventID != "evt_dup" {
		t.Errorf("outbox = %+v, want one succeeded record for evt_dup", got)
	}
	if got := hs.counter("reconciler_transitions_total", "from", "pending", "to", "succeeded", "source", "webhook"); got != 1 {
		t.Errorf("transitions = %v, want 1", got)
	}
}

// TestTwoEventsOneObject: Stripe may send one change as two Event objects
// (different evt_ ids); the second one is applied as a no-op.
func TestTwoEventsOneObject(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	row := hs.claim("acme", "run-1", nil)
	for i, name := range []string{piSucceeded, "stripe/2024-06-20/charge.succeeded", piSucceeded} {
		body := stripePayload(t, name, row.MetadataLocalID, fmt.Sprintf("evt_copy_%d", i))
		rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
		if rec.Code != http.StatusOK || result(t, rec) != "accepted" {
			t.Fatalf("delivery %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if got := hs.outbox(); len(got) != 1 {
		t.Fatalf("outbox holds %d records, want 1", len(got))
	}
	if got := hs.row(row); got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID != "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR" {
		t.Errorf("row = %s %q", got.Status, got.UpstreamReceiptID)
	}
}

// TestOrphanThenClaim: the webhook beats the runtime's claim; the claim
// picks the parked event up.
func TestOrphanThenClaim(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	// The row does not exist yet, but its local id is deterministic.
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-early", Tool: "stripe.charge", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: []byte(`{"amount":1050,"currency":"usd"}`), ReplayWindow: time.Hour,
	}, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	body := stripePayload(t, piSucceeded, c.Row.MetadataLocalID, "evt_early")
	rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
	if rec.Code != http.StatusOK || result(t, rec) != "orphan" {
		t.Fatalf("first delivery: %d %s, want 200 orphan", rec.Code, rec.Body)
	}
	if got := hs.counter("reconciler_webhooks_total", "vendor", "stripe", "result", "orphan"); got != 1 {
		t.Errorf("orphan = %v, want 1", got)
	}
	res, err := hs.store.Claim(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Row.Status != ledger.StatusSucceeded || res.Row.UpstreamReceiptID != "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR" {
		t.Fatalf("claimed row = %s %q, want the parked success applied", res.Row.Status, res.Row.UpstreamReceiptID)
	}
	// The retry of the same event is a duplicate now.
	rec = hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
	if rec.Code != http.StatusOK || result(t, rec) != "duplicate" {
		t.Fatalf("retry: %d %s, want 200 duplicate", rec.Code, rec.Body)
	}
}

func TestForeignTenant(t *testing.T) {
	o := defaultOptions()
	o.Stripe = append(o.Stripe, webhooks.StripeEndpoint{Name: "globex", Tenant: "globex", Secrets: []string{"whsec_globex"}})
	hs := newHarness(t, o)
	row := hs.claim("acme", "run-1", nil)
	body := stripePayload(t, piSucceeded, row.MetadataLocalID, "evt_foreign")
	rec := hs.post("/webhooks/stripe/globex", body, stripeHeader(body, t0, "whsec_globex"))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d %s", rec.Code, rec.Body)
	}
	if got := result(t, rec); got == "foreign_tenant" || got == "accepted" {
		t.Errorf("the sender was told %q", got)
	}
	if got := hs.row(row); got.Status != ledger.StatusPending {
		t.Errorf("another tenant's event moved the row to %s", got.Status)
	}
	if len(hs.outbox()) != 0 {
		t.Error("outbox record written")
	}
	if got := hs.counter("reconciler_alerts_total", "kind", "foreign_tenant"); got != 1 {
		t.Errorf("alerts{foreign_tenant} = %v, want 1", got)
	}
	if got := hs.counter("reconciler_webhooks_total", "vendor", "stripe", "result", "foreign_tenant"); got != 1 {
		t.Errorf("webhooks{foreign_tenant} = %v, want 1", got)
	}
	// The bare path is ambiguous with two endpoints.
	rec = hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
	if rec.Code != http.StatusNotFound || errorCode(t, rec) != "not_found" {
		t.Errorf("bare path with two endpoints: %d %s, want 404", rec.Code, rec.Body)
	}
}

func TestAlerts(t *testing.T) {
	tests := []struct {
		name     string
		expect   *ledger.Expect
		before   ledger.Status
		wantKind string
		want     ledger.Status
	}{
		{"mismatch", &ledger.Expect{Amount: 999, Currency: "usd"}, ledger.StatusPending, "mismatch", ledger.StatusPending},
		{"late success", nil, ledger.StatusFailedPoison, "late_success", ledger.StatusSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, defaultOptions())
			row := hs.claim("acme", "run-1", tt.expect)
			if tt.before == ledger.StatusFailedPoison {
				if _, _, err := hs.store.Report(context.Background(), "acme", row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 402, At: t0}); err != nil {
					t.Fatal(err)
				}
			}
			body := stripePayload(t, piSucceeded, row.MetadataLocalID, "evt_alert")
			rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			if got := hs.counter("reconciler_alerts_total", "kind", tt.wantKind); got != 1 {
				t.Errorf("alerts{%s} = %v, want 1", tt.wantKind, got)
			}
			if got := hs.row(row).Status; got != tt.want {
				t.Errorf("row = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestStandardDelivery(t *testing.T) {
	for _, name := range []string{"resend/email.sent", "resend/email.sent.tags-array"} {
		t.Run(name, func(t *testing.T) {
			hs := newHarness(t, defaultOptions())
			row := hs.claim("acme", "run-1", nil)
			body, err := fixtures.Set(fixtures.Load(name), "metadata_local_id", row.MetadataLocalID)
			if err != nil {
				t.Fatal(err)
			}
			h := signStandard(t, "msg_2mBWnqGx6b8Cz", body, t0, resendSecret)
			rec := hs.post("/webhooks/standard/resend", body, h)
			if rec.Code != http.StatusOK || result(t, rec) != "accepted" {
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			got := hs.row(row)
			if got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID != "56761188-7520-42d8-8898-ff6fc54ce618" {
				t.Errorf("row = %s %q", got.Status, got.UpstreamReceiptID)
			}
			if got.Resolution == nil || got.Resolution.VendorEventID != "msg_2mBWnqGx6b8Cz" {
				t.Errorf("resolution = %+v, want the webhook-id", got.Resolution)
			}
			if c := hs.counter("reconciler_webhooks_total", "vendor", "resend", "result", "accepted"); c != 1 {
				t.Errorf("accepted{resend} = %v", c)
			}
		})
	}
}

// TestIgnoredType: an event type the table ignores is recorded, not joined.
func TestIgnoredType(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	row := hs.claim("acme", "run-1", nil)
	body, err := fixtures.Set(stripePayload(t, piSucceeded, row.MetadataLocalID, "evt_dispute"), "type", "charge.dispute.created")
	if err != nil {
		t.Fatal(err)
	}
	rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
	if rec.Code != http.StatusOK || result(t, rec) != "ignored" {
		t.Fatalf("status %d %s, want 200 ignored", rec.Code, rec.Body)
	}
	if got := hs.row(row); got.Status != ledger.StatusPending || got.UpstreamReceiptID != "" {
		t.Errorf("row changed: %s", got.Status)
	}
}

// failingStore answers every Ingest with err.
type failingStore struct{ err error }

func (f failingStore) Ingest(context.Context, ledger.Delivery) (ledger.IngestResult, error) {
	return ledger.IngestResult{}, f.err
}

func TestStoreUnavailable(t *testing.T) {
	tests := []struct {
		name       string
		store      func(hs *harness) webhooks.Ingester
		wantStatus int
		wantCode   string
	}{
		{"closed bolt store", nil, http.StatusServiceUnavailable, "unavailable"},
		{"deadline", func(*harness) webhooks.Ingester { return failingStore{context.DeadlineExceeded} }, http.StatusServiceUnavailable, "unavailable"},
		{"other error", func(*harness) webhooks.Ingester { return failingStore{errors.New("disk on fire at /secret/path")} }, http.StatusInternalServerError, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultOptions()
			if tt.store != nil {
				o.Store = tt.store(nil)
			}
			hs := newHarness(t, o)
			row := hs.claim("acme", "run-1", nil)
			if tt.store == nil {
				if err := hs.store.Close(); err != nil {
					t.Fatal(err)
				}
			}
			body := stripePayload(t, piSucceeded, row.MetadataLocalID, "evt_down")
			rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
			if rec.Code != tt.wantStatus || errorCode(t, rec) != tt.wantCode {
				t.Fatalf("got %d %s, want %d %s", rec.Code, rec.Body, tt.wantStatus, tt.wantCode)
			}
			if strings.Contains(rec.Body.String(), "secret") {
				t.Errorf("internal error text leaked: %s", rec.Body)
			}
			if tt.wantStatus == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
}

func TestRouting(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	body := stripePayload(t, piSucceeded, "", "evt_route")
	tests := []struct {
		path string
		want int
	}{
		{"/webhooks/stripe/nope", http.StatusNotFound},
		{"/webhooks/paypal", http.StatusNotFound}, // no PayPal endpoint configured
		{"/webhooks/standard/stripe", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := hs.post(tt.path, body, stripeHeader(body, t0, stripeSecret))
			if rec.Code != tt.want {
				t.Fatalf("status %d %s, want %d", rec.Code, rec.Body, tt.want)
			}
			_ = errorCode(t, rec)
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	st := openBolt(t)
	tests := []struct {
		name string
		o    webhooks.Options
	}{
		{"no store", webhooks.Options{}},
		{"no secret", webhooks.Options{Store: st, Stripe: []webhooks.StripeEndpoint{{Name: "a", Tenant: "acme"}}}},
		{"empty secret", webhooks.Options{Store: st, Stripe: []webhooks.StripeEndpoint{{Name: "a", Tenant: "acme", Secrets: []string{""}}}}},
		{"bad tenant", webhooks.Options{Store: st, Stripe: []webhooks.StripeEndpoint{{Name: "a", Tenant: "a b", Secrets: []string{"s"}}}}},
		{"bad name", webhooks.Options{Store: st, Stripe: []webhooks.StripeEndpoint{{Name: "a/b", Tenant: "acme", Secrets: []string{"s"}}}}},
		{"twice", webhooks.Options{Store: st, Stripe: []webhooks.StripeEndpoint{{Name: "a", Tenant: "acme", Secrets: []string{"s"}}, {Name: "a", Tenant: "acme", Secrets: []string{"t"}}}}},
		{"standard secret not base64", webhooks.Options{Store: st, Standard: []webhooks.StandardEndpoint{{Name: "r", Tenant: "acme", Secrets: []string{"whsec_%%%"}}}}},
		{"standard bad vendor", webhooks.Options{Store: st, Standard: []webhooks.StandardEndpoint{{Name: "r", Tenant: "acme", Vendor: "Re Send", Secrets: []string{resendSecret}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := webhooks.New(tt.o)
			if err == nil {
				h.Close()
				t.Fatal("New accepted the options")
			}
			if strings.Contains(err.Error(), "%%%") {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}
}

// TestSharedRegistry: the API registers the alert and transition counters
// first; the handler reuses them instead of failing.
func TestSharedRegistry(t *testing.T) {
	hs := newHarness(t, defaultOptions())
	o := defaultOptions()
	o.Store, o.Registerer = hs.store, hs.reg
	h, err := webhooks.New(o)
	if err != nil {
		t.Fatalf("second handler on the same registry: %v", err)
	}
	h.Close()
}

// TestNoSecretsLogged runs deliveries of every kind with a logger that
// records everything, and looks for secrets, signatures and body content.
func TestNoSecretsLogged(t *testing.T) {
	var buf bytes.Buffer
	o := defaultOptions()
	o.Logger = newTextLogger(&buf)
	hs := newHarness(t, o)
	row := hs.claim("acme", "run-1", nil)
	body := stripePayload(t, piSucceeded, row.MetadataLocalID, "evt_log")
	sig := fixtures.SignStripe(body, t0, stripeSecret)
	hs.post("/webhooks/stripe", body, http.Header{"Stripe-Signature": {sig}})
	hs.post("/webhooks/stripe", body, stripeHeader(body, t0, "whsec_wrong"))
	hs.post("/webhooks/stripe", []byte(`{"id":`), stripeHeader([]byte(`{"id":`), t0, stripeSecret))
	logs := buf.String()
	if !strings.Contains(logs, "evt_log") {
		t.Fatalf("expected a log line for the delivery, got:\n%s", logs)
	}
	for _, secret := range []string{stripeSecret, sig[strings.Index(sig, "v1=")+3:], "Jenny", "INV-1042", "pm_1PWc"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log holds %q:\n%s", secret, logs)
		}
	}
}

// TestForeignLocalIDFormat: a signed event whose metadata value is not a
// local id this ledger could have issued (free text, non-ASCII) is
// acknowledged, not refused: it joins no row, and a 400 would make Stripe
// retry a good event for days.
func TestForeignLocalIDFormat(t *testing.T) {
	for _, tc := range []struct{ name, typ, localID, want string }{
		{"free text on a success", "payment_intent.succeeded", "Order 1234", "unmatched"},
		{"non-ASCII on an ignored type", "payment_intent.updated", "réf-42", "ignored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, defaultOptions())
			body, err := fixtures.Set(stripePayload(t, piSucceeded, tc.localID, "evt_foreign_"+tc.want), "type", tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret))
			if rec.Code != http.StatusOK || result(t, rec) != tc.want {
				t.Fatalf("status %d %s, want 200 %s", rec.Code, rec.Body, tc.want)
			}
		})
	}
}

// TestAppliedIsToldTheRow: every delivery that joins a row tells Applied its
// tenant and key (the API wakes the claims long-polling on it); a delivery
// that joins nothing tells nobody.
func TestAppliedIsToldTheRow(t *testing.T) {
	var mu sync.Mutex
	var told []string
	o := defaultOptions()
	o.Applied = func(tenant, key string) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, tenant+"/"+key)
	}
	hs := newHarness(t, o)
	row := hs.claim("acme", "run-1", nil)
	for _, lid := range []string{row.MetadataLocalID, "rl_00000000000000000000000000000000"} {
		body := stripePayload(t, piSucceeded, lid, "")
		if rec := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret)); rec.Code != http.StatusOK {
			t.Fatalf("status %d %s", rec.Code, rec.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0] != "acme/"+row.Key {
		t.Fatalf("Applied told %v, want [acme/%s]", told, row.Key)
	}
}
