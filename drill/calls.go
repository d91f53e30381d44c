package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// The tool every drill's agent calls, and how its calls are made.
const (
	toolCharge = "stripe.payment_intents.create"
	formType   = "application/x-www-form-urlencoded"
	keyHeader  = "Idempotency-Key"
	// localIDField is where a Stripe call carries the row's local id, so a
	// webhook or a search finds the row.
	localIDField = "metadata[" + client.MetadataLocalID + "]"
	// sdkStripe marks a call a runtime may make with its Stripe SDK.
	sdkStripe = "stripe"
)

// defaultCallTimeout bounds a vendor call that no drill means to time out.
const defaultCallTimeout = 10 * time.Second

// vendorCall is one vendor call described as data, so that every runtime
// makes the same request: a form-encoded Method to URL with Form, the
// ledger key in the KeyHeader header, the row's local id in the form field
// LocalIDField (none when empty: the sabotage that forgets it), bounded by
// TimeoutMS. Receipt lists where the vendor's answer names its object, as
// dotted paths into the answer's JSON: the first that holds a non-empty
// string is the receipt (a 2xx's "id", a 409 already-exists'
// "error.resource_id"). Every answer is a result, whatever its status; only
// no answer is an error. SDK "stripe" lets a runtime that has a Stripe SDK
// wired make the call through it (the Go runtime: stripe-go through
// client.StripeBackend, which places the key and the local id itself); the
// others send the request as described.
type vendorCall struct {
	URL          string            `json:"url"`
	Method       string            `json:"method"`
	Form         map[string]string `json:"form"`
	KeyHeader    string            `json:"key_header"`
	LocalIDField string            `json:"local_id_field,omitempty"`
	Receipt      []string          `json:"receipt"`
	TimeoutMS    int64             `json:"timeout_ms"`
	SDK          string            `json:"sdk,omitempty"`
}

// timeout is the call's bound.
func (c vendorCall) timeout() time.Duration {
	if c.TimeoutMS <= 0 {
		return defaultCallTimeout
	}
	return time.Duration(c.TimeoutMS) * time.Millisecond
}

// stripeReceipt is where the fake Stripe names the object: a 2xx returns
// it, a 409 "already exists" names it.
var stripeReceipt = []string{"id", "error.resource_id"}

// chargeFields is the PaymentIntent request: amount, currency, customer.
func chargeFields(amount int64) map[string]string {
	return map[string]string{"amount": strconv.FormatInt(amount, 10), "currency": "usd", "customer": "cus_drill"}
}

func formOf(fields map[string]string) url.Values {
	form := url.Values{}
	for k, v := range fields {
		form.Set(k, v)
	}
	return form
}

// chargeCall is the agent's PaymentIntent call to the vendor at base: the
// key in Idempotency-Key and the local id in metadata, unless withLocalID
// is false.
func chargeCall(base string, amount int64, withLocalID bool) vendorCall {
	c := vendorCall{
		URL: base + "/v1/payment_intents", Method: http.MethodPost, Form: chargeFields(amount),
		KeyHeader: keyHeader, LocalIDField: localIDField, Receipt: stripeReceipt,
		TimeoutMS: defaultCallTimeout.Milliseconds(),
	}
	if !withLocalID {
		c.LocalIDField = ""
	}
	return c
}

// refundCall is the compensation's vendor call to the vendor at base.
func refundCall(base, paymentIntent string) vendorCall {
	return vendorCall{
		URL: base + "/v1/refunds", Method: http.MethodPost, Form: map[string]string{"payment_intent": paymentIntent},
		KeyHeader: keyHeader, LocalIDField: localIDField, Receipt: stripeReceipt,
		TimeoutMS: defaultCallTimeout.Milliseconds(),
	}
}

// chargeClaim is the claim of one charge of amount: the intent holds only
// what defines the side effect, and the request envelope lets the resolver
// replay it with the same key.
func (e *env) chargeClaim(runID, toolCallID string, amount int64, intent map[string]any) client.ClaimRequest {
	return toolClaim(e.tool, runID, toolCallID, amount, intent)
}

// toolClaim is the charge's claim under registry entry t: its name,
// vendor and class.
func toolClaim(t ledger.Tool, runID, toolCallID string, amount int64, intent map[string]any) client.ClaimRequest {
	return client.ClaimRequest{
		RunID: runID, Tool: t.Name, ToolCallID: toolCallID,
		Vendor: t.Vendor, ToolClass: t.Class,
		Intent: intent,
		Request: &ledger.Request{
			Method: http.MethodPost, Path: "/v1/payment_intents", ContentType: formType,
			Body: formOf(chargeFields(amount)).Encode(),
		},
		Expect: &ledger.Expect{Amount: amount, Currency: "usd"},
	}
}

// chargeIntent is the business intent every drill charges.
func chargeIntent(amount int64) map[string]any {
	return map[string]any{"amount": amount, "currency": "usd", "customer": "cus_drill"}
}

// freshKey is what an unsafe retry layer does: a new identity per attempt.
func freshKey(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// callUnclaimed is an unsafe runtime's call: no claim, a fresh key, nothing
// reported. It is only used by sabotaged drills.
func callUnclaimed(ctx context.Context, a *agent, call vendorCall) (client.Result, error) {
	key := freshKey("unsafe")
	return a.call(ctx, call, key, "rl_"+key)
}
