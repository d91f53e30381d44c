package webhooks_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/webhooks"
)

func TestParseStripeSignature(t *testing.T) {
	sig := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		header  string
		wantT   int64
		wantV1  int
		wantErr error
	}{
		{"one v1", "t=1700000000,v1=" + sig, 1700000000, 1, nil},
		{"two v1 and v0", "t=1700000000,v1=" + sig + ",v1=" + sig + ",v0=" + sig, 1700000000, 2, nil},
		{"spaces", "t=1700000000, v1=" + sig, 1700000000, 1, nil},
		{"unknown key ignored", "t=1,x=y,v1=" + sig, 1, 1, nil},
		{"bad hex skipped", "t=1,v1=zz,v1=" + sig, 1, 1, nil},
		{"short v1 skipped", "t=1,v1=abcd,v1=" + sig, 1, 1, nil},
		{"empty", "", 0, 0, webhooks.ErrBadSignature},
		{"only v0", "t=1,v0=" + sig, 0, 0, webhooks.ErrBadSignature},
		{"no t", "v1=" + sig, 0, 0, webhooks.ErrUnparsable},
		{"t not a number", "t=abc,v1=" + sig, 0, 0, webhooks.ErrUnparsable},
		{"piece without =", "t=1,v1", 0, 0, webhooks.ErrUnparsable},
		{"value with =", "t=1,v1=a=b", 0, 0, webhooks.ErrUnparsable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := webhooks.ParseStripeSignature(tt.header)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil) != (err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got.Timestamp != tt.wantT || len(got.V1) != tt.wantV1 {
				t.Errorf("got t=%d with %d v1, want t=%d with %d", got.Timestamp, len(got.V1), tt.wantT, tt.wantV1)
			}
		})
	}
}

func TestVerifyStripe(t *testing.T) {
	body := fixtures.Load("stripe/2025-03-31.basil/payment_intent.succeeded")
	stripeGo := func(at time.Time, secret string) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
	}
	tol := 5 * time.Minute
	tests := []struct {
		name    string
		header  string
		body    []byte
		secrets []string
		wantErr error
	}{
		{"stripe-go signed", stripeGo(t0, stripeSecret), body, []string{stripeSecret}, nil},
		{"second secret of two", stripeGo(t0, stripeSecret), body, []string{stripeSecretOld, stripeSecret}, nil},
		{"second v1 of two", fixtures.SignStripe(body, t0, "whsec_gone", stripeSecret), body, []string{stripeSecret}, nil},
		{"at the tolerance", stripeGo(t0.Add(-tol), stripeSecret), body, []string{stripeSecret}, nil},
		{"wrong secret", stripeGo(t0, "whsec_other"), body, []string{stripeSecret}, webhooks.ErrBadSignature},
		{"tampered body", stripeGo(t0, stripeSecret), append([]byte(" "), body...), []string{stripeSecret}, webhooks.ErrBadSignature},
		{"v0 only", strings.Replace(stripeGo(t0, stripeSecret), "v1=", "v0=", 1), body, []string{stripeSecret}, webhooks.ErrBadSignature},
		{"stale", stripeGo(t0.Add(-tol-time.Second), stripeSecret), body, []string{stripeSecret}, webhooks.ErrStale},
		{"future", stripeGo(t0.Add(tol+time.Second), stripeSecret), body, []string{stripeSecret}, webhooks.ErrStale},
		// Signature first: a forged, stale delivery is a bad signature, not stale.
		{"forged and stale", stripeGo(t0.Add(-time.Hour), "whsec_other"), body, []string{stripeSecret}, webhooks.ErrBadSignature},
		{"timestamp swapped", strings.Replace(stripeGo(t0, stripeSecret), fmt.Sprintf("t=%d", t0.Unix()), fmt.Sprintf("t=%d", t0.Unix()-1), 1), body, []string{stripeSecret}, webhooks.ErrBadSignature},
		{"no header", "", body, []string{stripeSecret}, webhooks.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := webhooks.VerifyStripe(tt.header, tt.body, tt.secrets, tol, t0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeStripe(t *testing.T) {
	const lid = "rl_0123456789abcdef0123456789abcdef"
	tests := []struct {
		fixture    string
		wantType   string
		wantObject string
		wantKey    string
		wantAmount int64 // -1: none
	}{
		{"stripe/2024-06-20/payment_intent.succeeded", "payment_intent.succeeded", "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR", "k-1", 1050},
		{"stripe/2025-03-31.basil/payment_intent.succeeded", "payment_intent.succeeded", "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR", "k-1", 1050},
		{"stripe/2024-06-20/payment_intent.payment_failed", "payment_intent.payment_failed", "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR", "k-1", 1050},
		{"stripe/2025-03-31.basil/payment_intent.payment_failed", "payment_intent.payment_failed", "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR", "k-1", 1050},
		// A PaymentIntent's charge speaks of the PaymentIntent.
		{"stripe/2024-06-20/charge.succeeded", "charge.succeeded", "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR", "k-1", 1050},
		{"stripe/2025-03-31.basil/charge.succeeded", "charge.succeeded", "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR", "k-1", 1050},
		{"stripe/2024-06-20/refund.created", "refund.created", "re_3PWcJ2LkdIwHu7ix0Rf7Un2d", "k-1", 1050},
		{"stripe/2025-03-31.basil/refund.created", "refund.created", "re_3PWcJ2LkdIwHu7ix0Rf7Un2d", "k-1", 1050},
		{"stripe/2024-06-20/customer.created", "customer.created", "cus_QNNc9vXc2bKZ7e", "k-1", -1},
		{"stripe/2025-03-31.basil/customer.created", "customer.created", "cus_QNNc9vXc2bKZ7e", "k-1", -1},
		// Before 2017-05-25 `request` was a plain string: no key, still decoded.
		{"stripe/2017-02-14/charge.succeeded", "charge.succeeded", "ch_1A2b3C4d5E6f7G8h9I0jKlMn", "", 1050},
		{"stripe/2017-02-14/customer.created", "customer.created", "cus_AbCdEfGh123456", "", -1},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			body := stripePayload(t, tt.fixture, lid, "")
			if strings.Contains(string(body), fixtures.PlaceholderIdempotencyKey) {
				var err error
				if body, err = fixtures.Set(body, "idempotency_key", "k-1"); err != nil {
					t.Fatal(err)
				}
			}
			ev, err := webhooks.DecodeStripe(body, "")
			if err != nil {
				t.Fatal(err)
			}
			if ev.Vendor != "stripe" || ev.Type != tt.wantType || ev.ObjectID != tt.wantObject || ev.LocalID != lid || ev.IdempotencyKey != tt.wantKey {
				t.Errorf("event = %+v, want type %s object %s local id %s key %q", ev, tt.wantType, tt.wantObject, lid, tt.wantKey)
			}
			if !strings.HasPrefix(ev.ID, "evt_") || ev.Created.IsZero() || ev.Livemode {
				t.Errorf("id/created/livemode = %q %v %v", ev.ID, ev.Created, ev.Livemode)
			}
			switch {
			case tt.wantAmount < 0 && ev.Amount != nil:
				t.Errorf("amount = %d, want none", *ev.Amount)
			case tt.wantAmount >= 0 && (ev.Amount == nil || *ev.Amount != tt.wantAmount || ev.Currency != "usd"):
				t.Errorf("amount = %v %q, want %d usd", ev.Amount, ev.Currency, tt.wantAmount)
			}
		})
	}

	t.Run("custom metadata key", func(t *testing.T) {
		body := []byte(`{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1","object":"charge","metadata":{"rid":"rl_x","metadata_local_id":"rl_y"}}}}`)
		ev, err := webhooks.DecodeStripe(body, "rid")
		if err != nil || ev.LocalID != "rl_x" || ev.ObjectID != "ch_1" {
			t.Fatalf("got %+v, %v; want local id rl_x, object ch_1", ev, err)
		}
	})
	t.Run("loose shapes", func(t *testing.T) {
		body := []byte(`{"id":"evt_1","type":"x","request":{"id":null,"idempotency_key":null},"data":{"object":{"id":"ch_1","object":"charge","payment_intent":{"id":"pi_1"},"metadata":{"metadata_local_id":42}}}}`)
		ev, err := webhooks.DecodeStripe(body, "")
		if err != nil || ev.LocalID != "" || ev.ObjectID != "ch_1" || ev.IdempotencyKey != "" {
			t.Fatalf("got %+v, %v", ev, err)
		}
	})
	for _, bad := range []string{``, `[]`, `{`, `{"id":"evt_1"}`, `{"type":"x"}`, `{"id":1,"type":"x"}`} {
		t.Run("unparsable "+bad, func(t *testing.T) {
			if _, err := webhooks.DecodeStripe([]byte(bad), ""); !errors.Is(err, webhooks.ErrUnparsable) {
				t.Fatalf("err = %v, want ErrUnparsable", err)
			}
		})
	}
}
