package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/webhooks"
)

const (
	stripeSecret    = "whsec_test_stripe_secret_1"
	stripeSecretOld = "whsec_test_stripe_secret_0"
	// resendSecret is whsec_ + base64 of 24 bytes, like Resend's.
	resendSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// t0 is the tests' clock: every signature is made at t0 unless a case says otherwise.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// harness is one handler on a real bbolt store, behind echo.
type harness struct {
	t     *testing.T
	store *bolt.Store
	e     *echo.Echo
	h     *webhooks.Handler
	reg   *prometheus.Registry
	now   atomic.Pointer[time.Time]
}

func openBolt(t testing.TB) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// defaultOptions has one Stripe endpoint (two secrets: a roll in progress)
// and one Resend endpoint, both for tenant acme.
func defaultOptions() webhooks.Options {
	return webhooks.Options{
		Stripe: []webhooks.StripeEndpoint{{Name: "default", Tenant: "acme", Secrets: []string{stripeSecretOld, stripeSecret}}},
		Standard: []webhooks.StandardEndpoint{{
			Name: "resend", Tenant: "acme", Secrets: []string{resendSecret}, Vendor: "resend",
		}},
	}
}

func newHarness(t *testing.T, o webhooks.Options) *harness {
	t.Helper()
	hs := &harness{t: t, store: openBolt(t), e: echo.New(), reg: prometheus.NewRegistry()}
	hs.setNow(t0)
	if o.Store == nil {
		o.Store = hs.store
	}
	o.Registerer = hs.reg
	o.Now = func() time.Time { return *hs.now.Load() }
	h, err := webhooks.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Register(hs.e)
	hs.h = h
	return hs
}

func (hs *harness) setNow(t time.Time) { hs.now.Store(&t) }

// post sends a delivery through echo and returns the recorded answer.
func (hs *harness) post(path string, body []byte, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	hs.e.ServeHTTP(rec, req)
	return rec
}

func stripeHeader(body []byte, at time.Time, secrets ...string) http.Header {
	return http.Header{"Stripe-Signature": {fixtures.SignStripe(body, at, secrets...)}}
}

// claim inserts a pending row for tenant and returns it.
func (hs *harness) claim(tenant, runID string, expect *ledger.Expect) ledger.Row {
	hs.t.Helper()
	return claimRow(hs.t, hs.store, tenant, runID, expect)
}

func claimRow(t testing.TB, st ledger.Claims, tenant, runID string, expect *ledger.Expect) ledger.Row {
	t.Helper()
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: runID, Tool: "stripe.charge", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{"amount":1050,"currency":"usd"}`),
		Expect: expect, ReplayWindow: 24 * time.Hour,
	}, ledger.DefaultPolicy(), t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Claim(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return res.Row
}

func (hs *harness) row(r ledger.Row) ledger.Row {
	hs.t.Helper()
	got, err := hs.store.Get(context.Background(), r.Tenant, r.Key)
	if err != nil {
		hs.t.Fatal(err)
	}
	return got
}

func (hs *harness) outbox() []ledger.OutboxRecord {
	hs.t.Helper()
	evs, err := hs.store.PendingEvents(context.Background(), 1000)
	if err != nil {
		hs.t.Fatal(err)
	}
	return evs
}

// seen reports whether the store's inbox holds the event id: a probe
// delivery of an ignored type is a duplicate exactly when it does. The
// probe itself records the id, so call seen once per id.
func (hs *harness) seen(vendor, eventID string) bool {
	hs.t.Helper()
	res, err := hs.store.Ingest(context.Background(), ledger.Delivery{
		Tenant: "probe", Vendor: vendor, EventID: eventID, Ignore: true, At: t0,
	})
	if err != nil {
		hs.t.Fatal(err)
	}
	return res.Outcome == ledger.IngestDuplicate
}

func (hs *harness) counter(name string, labels ...string) float64 {
	hs.t.Helper()
	mfs, err := hs.reg.Gather()
	if err != nil {
		hs.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				match := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						match = true
					}
				}
				ok = ok && match
			}
			if ok {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// stripePayload returns a Stripe fixture naming row's local id, with the
// event id replaced when id is not empty.
func stripePayload(t testing.TB, name, localID, id string) []byte {
	t.Helper()
	b := fixtures.Load(name)
	var err error
	if localID != "" {
		if b, err = fixtures.Set(b, "metadata_local_id", localID); err != nil {
			t.Fatal(err)
		}
	}
	if id != "" {
		if b, err = fixtures.Set(b, "id", id); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func errorCode(t testing.TB, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", rec.Body.String(), err)
	}
	if body.Error.Code == "" || body.Error.Message == "" {
		t.Fatalf("error body %q lacks code or message", rec.Body.String())
	}
	return body.Error.Code
}

func result(t testing.TB, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct{ Result string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("ack body %q: %v", rec.Body.String(), err)
	}
	return body.Result
}

func newTextLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
