package ledger_test

import (
	"fmt"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

func boolp(b bool) *bool { return &b }

func TestClassify(t *testing.T) {
	resp := func(status int, receipt string, headers map[string]string) ledger.Outcome {
		return ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: status, ReceiptID: receipt, Headers: headers, At: t0}
	}
	replayed := map[string]string{"Idempotent-Replayed": "true"}
	noRetry := map[string]string{"Stripe-Should-Retry": "false"}
	retry := map[string]string{"Stripe-Should-Retry": "true"}

	tests := []struct {
		name        string
		o           ledger.Outcome
		want        ledger.Status // "" = stays pending
		replayed    bool
		shouldRetry *bool
	}{
		{name: "200 with receipt", o: resp(200, "pi_1", nil), want: ledger.StatusSucceeded},
		{name: "201 with receipt", o: resp(201, "pi_1", nil), want: ledger.StatusSucceeded},
		{name: "204 without receipt is still a success", o: resp(204, "", nil), want: ledger.StatusSucceeded},
		{name: "299", o: resp(299, "pi_1", nil), want: ledger.StatusSucceeded},
		{name: "200 Idempotent-Replayed true", o: resp(200, "pi_1", replayed), want: ledger.StatusSucceeded, replayed: true},
		{name: "200 Idempotent-Replayed false", o: resp(200, "pi_1", map[string]string{"Idempotent-Replayed": "false"}), want: ledger.StatusSucceeded},
		{name: "200 Idempotent-Replayed garbage", o: resp(200, "pi_1", map[string]string{"Idempotent-Replayed": "yes"}), want: ledger.StatusSucceeded},
		{name: "409 with receipt: already exists", o: resp(409, "pi_1", nil), want: ledger.StatusSucceeded},
		{name: "409 without receipt: key in use", o: resp(409, "", nil), want: "", shouldRetry: boolp(true)},
		{name: "409 without receipt, Should-Retry false", o: resp(409, "", noRetry), want: ledger.StatusFailedPoison, shouldRetry: boolp(false)},
		{name: "429", o: resp(429, "", nil), want: "", shouldRetry: boolp(true)},
		{name: "429 Should-Retry true", o: resp(429, "", retry), want: "", shouldRetry: boolp(true)},
		{name: "429 Should-Retry false", o: resp(429, "", noRetry), want: ledger.StatusFailedPoison, shouldRetry: boolp(false)},
		{name: "500", o: resp(500, "", nil), want: ledger.StatusUnknown},
		{name: "502", o: resp(502, "", nil), want: ledger.StatusUnknown},
		{name: "503", o: resp(503, "", nil), want: ledger.StatusUnknown},
		{name: "504", o: resp(504, "", nil), want: ledger.StatusUnknown},
		{name: "599", o: resp(599, "", nil), want: ledger.StatusUnknown},
		{name: "500 Should-Retry false stays unknown", o: resp(500, "", noRetry), want: ledger.StatusUnknown, shouldRetry: boolp(false)},
		{name: "500 replayed by the vendor stays unknown", o: resp(500, "", replayed), want: ledger.StatusUnknown, replayed: true},
		{name: "408", o: resp(408, "", nil), want: ledger.StatusUnknown},
		{name: "408 Should-Retry false stays unknown", o: resp(408, "", noRetry), want: ledger.StatusUnknown, shouldRetry: boolp(false)},
		{name: "100", o: resp(100, "", nil), want: ledger.StatusUnknown},
		{name: "199", o: resp(199, "", nil), want: ledger.StatusUnknown},
		{name: "302", o: resp(302, "", nil), want: ledger.StatusUnknown},
		{name: "399", o: resp(399, "", nil), want: ledger.StatusUnknown},
		{name: "400", o: resp(400, "", nil), want: ledger.StatusFailedPoison},
		{name: "400 with receipt", o: resp(400, "ch_declined", nil), want: ledger.StatusFailedPoison},
		{name: "401", o: resp(401, "", nil), want: ledger.StatusFailedPoison},
		{name: "402 card declined", o: resp(402, "", nil), want: ledger.StatusFailedPoison},
		{name: "402 Should-Retry false", o: resp(402, "", noRetry), want: ledger.StatusFailedPoison, shouldRetry: boolp(false)},
		// Should-Retry true does not make a validation error retryable: only
		// 409 and 429 mean the vendor did not take the attempt.
		{name: "400 Should-Retry true", o: resp(400, "", retry), want: ledger.StatusFailedPoison, shouldRetry: boolp(true)},
		{name: "404", o: resp(404, "", nil), want: ledger.StatusFailedPoison},
		{name: "422", o: resp(422, "", nil), want: ledger.StatusFailedPoison},
		{name: "499", o: resp(499, "", nil), want: ledger.StatusFailedPoison},
		{name: "timeout", o: ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t0}, want: ledger.StatusUnknown},
		{name: "timeout with Should-Retry false", o: ledger.Outcome{Kind: ledger.OutcomeTimeout, Headers: noRetry, At: t0}, want: ledger.StatusUnknown, shouldRetry: boolp(false)},
		{name: "network error", o: ledger.Outcome{Kind: ledger.OutcomeNetworkError, At: t0}, want: ledger.StatusUnknown},
		{name: "header lower case", o: resp(429, "", map[string]string{"stripe-should-retry": "false"}), want: ledger.StatusFailedPoison, shouldRetry: boolp(false)},
		{name: "header upper case", o: resp(429, "", map[string]string{"STRIPE-SHOULD-RETRY": "FALSE"}), want: ledger.StatusFailedPoison, shouldRetry: boolp(false)},
		{name: "header value with spaces", o: resp(429, "", map[string]string{"Stripe-Should-Retry": " false "}), want: ledger.StatusFailedPoison, shouldRetry: boolp(false)},
		{name: "replayed header mixed case", o: resp(200, "pi_1", map[string]string{"idempotent-REPLAYED": "True"}), want: ledger.StatusSucceeded, replayed: true},
		{name: "unrelated headers ignored", o: resp(429, "", map[string]string{"Retry-After": "5", "Request-Id": "req_1"}), want: "", shouldRetry: boolp(true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.o.Validate(); err != nil {
				t.Fatalf("the case itself is not a valid outcome: %v", err)
			}
			got := ledger.Classify(tt.o)
			if got.Status != tt.want {
				t.Fatalf("Classify status = %q, want %q", got.Status, tt.want)
			}
			if got.Replayed != tt.replayed {
				t.Fatalf("Classify replayed = %v, want %v", got.Replayed, tt.replayed)
			}
			if fmt.Sprint(deref(got.ShouldRetry)) != fmt.Sprint(deref(tt.shouldRetry)) {
				t.Fatalf("Classify should_retry = %v, want %v", deref(got.ShouldRetry), deref(tt.shouldRetry))
			}
			if got.Source != ledger.SourceRuntime || got.ReceiptID != tt.o.ReceiptID || got.HTTPStatus != tt.o.HTTPStatus || !got.At.Equal(tt.o.At) {
				t.Fatalf("Classify = %+v, want source runtime and the outcome's receipt, status and time", got)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Classify produced invalid evidence: %v", err)
			}
		})
	}
}

// deref shows a *bool as true, false or <nil>.
func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestClassifyDeterministic: the same outcome always classifies the same way,
// even when the runtime sent one header in two spellings (Validate refuses
// that, but Classify must not depend on map iteration order either, because
// a store may re-run it when a group commit retries).
func TestClassifyDeterministic(t *testing.T) {
	o := ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 429, Headers: map[string]string{
		"Stripe-Should-Retry": "false", "stripe-should-retry": "true", "STRIPE-SHOULD-RETRY": "true",
		"Idempotent-Replayed": "true", "idempotent-replayed": "false",
	}}
	first := ledger.Classify(o)
	for i := 0; i < 200; i++ {
		got := ledger.Classify(o)
		if got.Status != first.Status || deref(got.ShouldRetry) != deref(first.ShouldRetry) || got.Replayed != first.Replayed {
			t.Fatalf("Classify run %d = %+v, first run %+v", i, got, first)
		}
	}
}
