package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	stripeclient "github.com/stripe/stripe-go/v79/client"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/ledger"
)

// stripeAPI is a stripe-go client pointed at the fake, its API backend
// wrapped by client.StripeBackend unless raw.
func stripeAPI(t *testing.T, v *fakeStripe, raw bool) *stripeclient.API {
	t.Helper()
	inner := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(v.URL()), HTTPClient: v.Client(),
		MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	b := inner
	if !raw {
		b = client.NewStripeBackend(inner)
	}
	sc := &stripeclient.API{}
	sc.Init("sk_test_123", &stripe.Backends{API: b, Connect: b, Uploads: b})
	return sc
}

// createPI is the CallFunc of a runtime using stripe-go behind StripeBackend:
// it only passes ctx; the backend adds the key and the local id.
func createPI(sc *stripeclient.API) client.CallFunc {
	return func(ctx context.Context, _, _ string) (client.Result, error) {
		params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
		params.Context = ctx
		pi, err := sc.PaymentIntents.New(params)
		return client.StripeResult(pi, err)
	}
}

func TestStripeBackendDo(t *testing.T) {
	tests := []struct {
		name       string
		faults     []fakestripe.Fault
		twice      bool // Do again after the first (the harness retrying)
		wantStatus ledger.Status
		wantErr    error
		wantObj    int
		check      func(t *testing.T, out client.Outcome, err error)
	}{
		{name: "created", wantStatus: ledger.StatusSucceeded, wantObj: 1,
			check: func(t *testing.T, out client.Outcome, err error) {
				if out.ReceiptID() != "pi_1" || out.Result.HTTPStatus != 200 {
					t.Errorf("result = %+v, want 200 pi_1", out.Result)
				}
			}},
		{name: "timeout, then the retry is replayed", faults: []fakestripe.Fault{fakestripe.FaultHang}, twice: true, wantStatus: ledger.StatusSucceeded, wantObj: 1,
			check: func(t *testing.T, out client.Outcome, err error) {
				if out.Decision != ledger.DecisionRetrySameKey || out.Result.Headers["Idempotent-Replayed"] != "true" || !out.Row.IdempotentReplayed {
					t.Errorf("outcome = %+v, want a replayed retry_same_key", out)
				}
			}},
		{name: "declined card", faults: []fakestripe.Fault{fakestripe.FaultDecline}, wantStatus: ledger.StatusFailedPoison, wantErr: client.ErrStopped, wantObj: 1,
			check: func(t *testing.T, out client.Outcome, err error) {
				var se *stripe.Error
				if !errors.As(err, &se) || se.Code != stripe.ErrorCodeCardDeclined {
					t.Errorf("error %v does not carry the stripe card error", err)
				}
				if out.Result.HTTPStatus != 402 || out.Result.ReceiptID != "pi_1" || out.Result.Headers["Stripe-Should-Retry"] != "false" {
					t.Errorf("result = %+v, want 402, pi_1, Stripe-Should-Retry false", out.Result)
				}
			}},
		{name: "stripe 500", faults: []fakestripe.Fault{fakestripe.Fault500}, wantStatus: ledger.StatusUnknown, wantErr: client.ErrUnsettled, wantObj: 0},
		{name: "409 already exists", faults: []fakestripe.Fault{fakestripe.Fault409}, wantStatus: ledger.StatusSucceeded, wantObj: 1,
			check: func(t *testing.T, out client.Outcome, err error) {
				if out.Row.UpstreamReceiptID != "pi_1" {
					t.Errorf("receipt = %q, want pi_1", out.Row.UpstreamReceiptID)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			v := newFakeStripe(t, tt.faults...)
			sc := stripeAPI(t, v, false)
			c := e.client(t, client.WithCallTimeout(300*time.Millisecond))
			out, err := c.Do(context.Background(), chargeClaim(1050), createPI(sc))
			if tt.twice {
				out, err = c.Do(context.Background(), chargeClaim(1050), createPI(sc))
			}
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Do: %v", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Do error = %v, want %v", err, tt.wantErr)
			}
			if got := e.row(t, out.Key).Status; got != tt.wantStatus {
				t.Errorf("row status = %s, want %s", got, tt.wantStatus)
			}
			if got := v.ObjectCount(); got != tt.wantObj {
				t.Errorf("vendor objects = %d, want %d", got, tt.wantObj)
			}
			for _, p := range v.received() {
				if p.key != out.Key {
					t.Errorf("Idempotency-Key = %q, want the ledger key %q", p.key, out.Key)
				}
				if p.localID != out.LocalID || !strings.HasPrefix(p.localID, "rl_") {
					t.Errorf("metadata[metadata_local_id] = %q, want %q", p.localID, out.LocalID)
				}
				if p.amount != "1050" {
					t.Errorf("amount = %q, want 1050", p.amount)
				}
			}
			if tt.check != nil {
				tt.check(t, out, err)
			}
		})
	}
}

// TestStripeBackendRefuses: writes that would go out without the ledger's
// key never reach Stripe.
func TestStripeBackendRefuses(t *testing.T) {
	tests := []struct {
		name    string
		ctx     context.Context
		key     *string
		header  string // an Idempotency-Key in params.Headers
		wantErr error
	}{
		{name: "no key in the context", ctx: context.Background(), wantErr: client.ErrNoKey},
		{name: "no context at all", wantErr: client.ErrNoKey},
		{name: "another explicit key", ctx: client.WithKey(context.Background(), "k1", "rl_1"), key: stripe.String("model-made-key")},
		// stripe-go applies params.Headers last, with Set: this key would
		// replace the ledger's on the wire.
		{name: "another key in params.Headers", ctx: client.WithKey(context.Background(), "k1", "rl_1"), header: "model-made-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newFakeStripe(t)
			sc := stripeAPI(t, v, false)
			params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
			params.Context = tt.ctx
			params.IdempotencyKey = tt.key
			if tt.header != "" {
				params.Headers = http.Header{"idempotency-key": {tt.header}}
			}
			_, err := sc.PaymentIntents.New(params)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("error = %v, want %v", err, tt.wantErr)
			}
			if n := len(v.received()); n != 0 {
				t.Errorf("stripe received %d writes", n)
			}
		})
	}
}

// TestStripeParams: the helper for the default backend sets the key and the
// local id itself.
func TestStripeParams(t *testing.T) {
	v := newFakeStripe(t)
	sc := stripeAPI(t, v, true)
	params := client.StripeParams(context.Background(), &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}, "key_abc", "rl_abc")
	pi, err := sc.PaymentIntents.New(params)
	res, err := client.StripeResult(pi, err)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if res.HTTPStatus != 200 || res.ReceiptID != "pi_1" {
		t.Errorf("result = %+v, want 200 pi_1", res)
	}
	posts := v.received()
	if len(posts) != 1 || posts[0].key != "key_abc" || posts[0].localID != "rl_abc" {
		t.Errorf("stripe received %+v, want key_abc / rl_abc", posts)
	}
}

// TestStripeResultTransportError: no Stripe answer is a zero Result.
func TestStripeResultTransportError(t *testing.T) {
	cause := context.DeadlineExceeded
	res, err := client.StripeResult((*stripe.PaymentIntent)(nil), cause)
	if res.HTTPStatus != 0 || !errors.Is(err, cause) {
		t.Errorf("StripeResult = %+v, %v; want a zero result and the cause", res, err)
	}
}

// TestStripeBackendMetadataOnlyWhereTaken: an endpoint whose params have no
// metadata (cancel) gets the key but no metadata, which Stripe would refuse.
func TestStripeBackendMetadataOnlyWhereTaken(t *testing.T) {
	v := newFakeStripe(t)
	// The intent to cancel: Stripe cancels only what exists.
	v.Put(map[string]any{"id": "pi_1", "object": "payment_intent", "status": "requires_payment_method"}, time.Now())
	sc := stripeAPI(t, v, false)
	params := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("duplicate")}
	params.Context = client.WithKey(context.Background(), "key_cancel", "rl_cancel")
	if _, err := sc.PaymentIntents.Cancel("pi_1", params); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	posts := v.received()
	if len(posts) != 1 || posts[0].key != "key_cancel" || posts[0].localID != "" {
		t.Errorf("stripe received %+v, want key_cancel and no metadata", posts)
	}
}
