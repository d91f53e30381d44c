package main

import (
	"log/slog"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
)

// TestStripeMetadataKey: the resolver searches Stripe by the metadata key
// the endpoints share (a configured one, not only the default), and by the
// default when they disagree.
func TestStripeMetadataKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
		want string
	}{
		{"no endpoint: the resolver's default", nil, ""},
		{"one configured key", []string{"order_ref"}, "order_ref"},
		{"two endpoints, one key", []string{"order_ref", "order_ref"}, "order_ref"},
		{"keys that disagree: the default", []string{"order_ref", "metadata_local_id"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Main{Logger: slog.New(slog.DiscardHandler)}
			for _, k := range tc.keys {
				m.Config.Stripe.Endpoints = append(m.Config.Stripe.Endpoints, config.StripeEndpoint{MetadataKey: k})
			}
			if got := m.stripeMetadataKey(); got != tc.want {
				t.Fatalf("stripeMetadataKey = %q, want %q", got, tc.want)
			}
		})
	}
}
