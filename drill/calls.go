package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v79"
	stripeclient "github.com/stripe/stripe-go/v79/client"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// The tool every drill's agent calls.
const (
	toolCharge = "stripe.payment_intents.create"
	formType   = "application/x-www-form-urlencoded"
)

// vendorAPI is the runtime's HTTP client for the fake vendor. Its
// transport is client.Transport: every write carries the ledger key of the
// call's context as Idempotency-Key, and a write without one is refused.
type vendorAPI struct {
	base string
	hc   *http.Client
}

func newVendorAPI(base string) *vendorAPI {
	return &vendorAPI{base: base, hc: &http.Client{Transport: &client.Transport{Header: "Idempotency-Key"}}}
}

// post sends one form write and turns the answer into a client.Result: the
// object id of a 2xx, or the resource a 409 "already exists" names. An
// answer that is not a 2xx is also an error (with its status in the Result).
func (v *vendorAPI) post(ctx context.Context, path string, form url.Values) (client.Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return client.Result{}, err
	}
	req.Header.Set("Content-Type", formType)
	resp, err := v.hc.Do(req)
	if err != nil {
		return client.Result{}, fmt.Errorf("post %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// The status arrived: the vendor answered, whatever the body says.
		return client.ResultFromResponse(resp, ""), fmt.Errorf("post %s: read answer: %w", path, err)
	}
	if resp.StatusCode/100 == 2 {
		var obj Object
		if err := json.Unmarshal(data, &obj); err != nil {
			return client.ResultFromResponse(resp, ""), fmt.Errorf("post %s: decode answer: %w", path, err)
		}
		return client.ResultFromResponse(resp, obj.ID), nil
	}
	var se stripeErrorBody
	_ = json.Unmarshal(data, &se)
	return client.ResultFromResponse(resp, se.Error.ResourceID),
		fmt.Errorf("post %s: vendor answered %d %s", path, resp.StatusCode, se.Error.Code)
}

// chargeForm is the PaymentIntent request: amount, currency, customer.
func chargeForm(amount int64) url.Values {
	return url.Values{"amount": {strconv.FormatInt(amount, 10)}, "currency": {"usd"}, "customer": {"cus_drill"}}
}

// charge is the agent's vendor call for a PaymentIntent as client.Do runs
// it: the key travels in ctx to the transport, and the local id goes into
// metadata so a webhook or a search can find the row — unless withLocalID
// is false (the sabotage that forgets it).
func (v *vendorAPI) charge(amount int64, withLocalID bool) client.CallFunc {
	return func(ctx context.Context, key, localID string) (client.Result, error) {
		form := chargeForm(amount)
		if withLocalID {
			form.Set("metadata[metadata_local_id]", localID)
		}
		return v.post(ctx, "/v1/payment_intents", form)
	}
}

// refund is the compensation's vendor call.
func (v *vendorAPI) refund(paymentIntent string) client.CallFunc {
	return func(ctx context.Context, key, localID string) (client.Result, error) {
		form := url.Values{"payment_intent": {paymentIntent}, "metadata[metadata_local_id]": {localID}}
		return v.post(ctx, "/v1/refunds", form)
	}
}

// chargeClaim is the claim of one charge: the intent holds only what
// defines the side effect, and the request envelope lets the resolver
// replay it with the same key.
func chargeClaim(runID, toolCallID string, intent map[string]any) client.ClaimRequest {
	amount, _ := intent["amount"].(int64)
	return client.ClaimRequest{
		RunID: runID, Tool: toolCharge, ToolCallID: toolCallID,
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: intent,
		Request: &ledger.Request{
			Method: http.MethodPost, Path: "/v1/payment_intents", ContentType: formType,
			Body: chargeForm(amount).Encode(),
		},
		Expect: &ledger.Expect{Amount: amount, Currency: "usd"},
	}
}

// intentOf is what the runtime does with a model's tool-call arguments: it
// scrubs the fields a model may invent (request ids, idempotency keys) so a
// re-emitted call with fresh ephemera is still the same intent.
func intentOf(args map[string]any, scrub bool) map[string]any {
	if scrub {
		return client.Scrub(args)
	}
	return args
}

// freshKey is what an unsafe retry layer does: a new identity per attempt.
func freshKey(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// callUnclaimed is an unsafe runtime's call: no claim, a fresh key, nothing
// reported. It is only used by sabotaged drills.
func callUnclaimed(ctx context.Context, call client.CallFunc) (client.Result, error) {
	key := freshKey("unsafe")
	return call(client.WithKey(ctx, key, "rl_"+key), key, "rl_"+key)
}

// stripeCharge is the same PaymentIntent call made the way most runtimes
// would make it, with stripe-go, through client.StripeBackend: it sets the
// ledger key as the Idempotency-Key explicitly (stripe-go would mint a
// random one) and metadata[metadata_local_id]. stripe-go's own network
// retries are off: the ledger decides about retries, with the same key.
func stripeCharge(base string, amount int64) client.CallFunc {
	inner := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(base),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	sc := &stripeclient.API{}
	sc.Init("sk_test_drill", &stripe.Backends{API: client.NewStripeBackend(inner)})
	return func(ctx context.Context, _, _ string) (client.Result, error) {
		params := &stripe.PaymentIntentParams{
			Amount: stripe.Int64(amount), Currency: stripe.String("usd"), Customer: stripe.String("cus_drill"),
		}
		params.Context = ctx // carries the key and the local id to StripeBackend
		pi, err := sc.PaymentIntents.New(params)
		return client.StripeResult(pi, err)
	}
}
