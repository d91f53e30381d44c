package webhooks

import (
	"encoding/json"
	"testing"

	"github.com/agentledger/reconciler/fixtures"
)

// BenchmarkDecodeStripe is the partial decode of a verified 3 KB Stripe
// event (fixtures' payment_intent.succeeded) into an Event, next to
// encoding/json decoding the same body into the same struct (what
// DecodeStripe ran before it used go-json-experiment's engine).
func BenchmarkDecodeStripe(b *testing.B) {
	body := fixtures.Load("stripe/2024-06-20/payment_intent.succeeded")
	b.Run("events", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeStripe(body, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var se stripeEvent
			if err := json.Unmarshal(body, &se); err != nil {
				b.Fatal(err)
			}
		}
	})
}
