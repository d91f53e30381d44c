package webhooks_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/webhooks"
)

// The handlers sit on the service's echo instance. A signed Stripe event is
// stored (and answered 200) once; its retry is a duplicate; a forged one is
// a 400 and stores nothing.
func ExampleHandler_Register() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(ledger.DefaultPolicy())
	defer store.Close()
	h, err := webhooks.New(webhooks.Options{
		Store:  store,
		Stripe: []webhooks.StripeEndpoint{{Name: "default", Tenant: "acme", Secrets: []string{"whsec_example"}}},
		Now:    func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	e := echo.New()
	h.Register(e)

	body := fixtures.Load("stripe/2024-06-20/payment_intent.succeeded")
	for _, secret := range []string{"whsec_example", "whsec_example", "whsec_forged"} {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(string(body)))
		req.Header.Set("Stripe-Signature", fixtures.SignStripe(body, now, secret))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 {"result":"orphan"}
	// 200 {"result":"duplicate"}
	// 400 {"error":{"code":"bad_signature","message":"signature does not match"}}
}

// VerifyStripe checks the signature before the age, and rejects timestamps
// too far in the future as well as too old.
func ExampleVerifyStripe() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"id":"evt_1","type":"customer.created"}`)
	for _, at := range []time.Time{now, now.Add(-10 * time.Minute), now.Add(10 * time.Minute)} {
		header := fixtures.SignStripe(body, at, "whsec_example")
		fmt.Println(webhooks.VerifyStripe(header, body, []string{"whsec_example"}, 5*time.Minute, now))
	}
	fmt.Println(webhooks.VerifyStripe(fixtures.SignStripe(body, now.Add(-time.Hour), "whsec_forged"), body, []string{"whsec_example"}, 5*time.Minute, now))
	// Output:
	// <nil>
	// timestamp outside tolerance: signed 10m0s ago
	// timestamp outside tolerance: signed 10m0s in the future
	// bad signature: no v1 signature matches a secret of the endpoint
}
