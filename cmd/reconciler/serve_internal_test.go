package main

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
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

type backlog struct {
	depth  int
	oldest time.Duration
}

func (b backlog) Backlog() (int, time.Duration) { return b.depth, b.oldest }

// TestOutboxBacklog: /readyz's outbox check is degraded, never failing,
// past events.degraded_depth, and off at 0.
func TestOutboxBacklog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       backlog
		limit   int
		want    string // "" = ready
		wantErr bool
	}{
		{"empty", backlog{}, 10, "", false},
		{"at the limit", backlog{10, time.Second}, 10, "", false},
		{"past the limit", backlog{11, 1500 * time.Millisecond}, 10,
			"11 events wait in the outbox (degraded past 10); the oldest has waited 1.5s", true},
		{"disabled", backlog{1 << 20, time.Hour}, 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := outboxBacklog(tc.b, tc.limit)
			var d *api.Degraded
			if (err != nil) != tc.wantErr || err != nil && (!errors.As(err, &d) || d.Detail != tc.want) {
				t.Fatalf("outboxBacklog: got %v, want degraded %q", err, tc.want)
			}
		})
	}
}
