package webhooks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// TestDeliverySpan: with a recording span in the request (the API's, in
// serve), a delivery names it webhook and puts the event, the result and
// the row on it, linked to the row's claim; a forged one records its
// result and nothing of the body or the secret.
func TestDeliverySpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	hs := newHarness(t, defaultOptions())
	hs.e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, span := tp.Tracer("test").Start(c.Request().Context(), "POST")
			defer span.End()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	})
	const claimTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_1", Tool: "stripe.charge", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(`{"amount":1050}`), ReplayWindow: time.Hour, Traceparent: claimTP,
	}, ledger.DefaultPolicy(), t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	res, err := hs.store.Claim(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	body := stripePayload(t, piSucceeded, res.Row.MetadataLocalID, "evt_traced")
	if r := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, stripeSecret)); r.Code != http.StatusOK {
		t.Fatalf("delivery = %d %s", r.Code, r.Body)
	}
	if r := hs.post("/webhooks/stripe", body, stripeHeader(body, t0, "whsec_forged")); r.Code != http.StatusBadRequest {
		t.Fatalf("forged delivery = %d", r.Code)
	}
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].Name() != "webhook" || spans[1].Name() != "webhook" {
		t.Fatalf("spans %v", spans)
	}
	a := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		a[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{
		"reconciler.vendor_event_id": "evt_traced", "reconciler.result": "accepted", "reconciler.webhook.endpoint": "default",
		"reconciler.webhook.event_type": "payment_intent.succeeded", "reconciler.idempotency_key": res.Row.Key,
		"reconciler.status": "succeeded", "reconciler.vendor": "stripe",
	} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if l := spans[0].Links(); len(l) != 1 || tracing.Traceparent(l[0].SpanContext) != claimTP {
		t.Errorf("links %v, want the claim %s", l, claimTP)
	}
	forged := map[string]string{}
	for _, kv := range spans[1].Attributes() {
		forged[string(kv.Key)] = kv.Value.String()
		if strings.Contains(kv.Value.String(), "whsec_") || strings.Contains(kv.Value.String(), "payment_intent") {
			t.Errorf("forged delivery's attribute %s = %q", kv.Key, kv.Value.String())
		}
	}
	if forged["reconciler.result"] != "bad_signature" {
		t.Errorf("forged delivery attributes %v", forged)
	}
}
