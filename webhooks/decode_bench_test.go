package webhooks

import (
	"encoding/json"
	"testing"

	"github.com/agentledger/reconciler/fixtures"
)

// BenchmarkDecodeStripe is the partial decode of a verified 2 KB Stripe
// event (fixtures' payment_intent.succeeded) into an Event (events: the
// one-pass scanner), next to the reflection decoder it replaced
// (reflection: go-json-experiment's Unmarshal into stripeEvent) and
// encoding/json decoding the same body into the same struct.
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
	b.Run("reflection", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeStripeReflect(body, ""); err != nil {
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
