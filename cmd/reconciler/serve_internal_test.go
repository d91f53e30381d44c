package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
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

// TestRelaySyncedAfter: auto waits out the embedded server's sync with a
// margin, deletes at once on a quorum-acked stream, and assumes a stock
// server's 2-minute sync otherwise; a configured value is used as is.
func TestRelaySyncedAfter(t *testing.T) {
	cases := []struct {
		name     string
		c        config.SyncedAfter
		embedded bool
		replicas int
		want     time.Duration
	}{
		{"auto, embedded", config.SyncedAfterAuto, true, 1, 3 * time.Second},
		{"auto, external R1", config.SyncedAfterAuto, false, 1, 150 * time.Second},
		{"auto, external R3", config.SyncedAfterAuto, false, 3, 0},
		{"auto, external R5", config.SyncedAfterAuto, false, 5, 0},
		{"configured, external R3", config.SyncedAfter(5 * time.Second), false, 3, 5 * time.Second},
		{"configured zero, embedded", 0, true, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := relaySyncedAfter(tc.c, tc.embedded, tc.replicas); got != tc.want {
				t.Errorf("relaySyncedAfter: got %s, want %s", got, tc.want)
			}
		})
	}
	if natsserver.SyncedAfter <= natsserver.DefaultSyncInterval {
		t.Errorf("the embedded server's synced-after %s does not exceed its sync interval %s", natsserver.SyncedAfter, natsserver.DefaultSyncInterval)
	}
}

// TestTracingOn: traces are off unless an OTEL_* variable asks for them.
func TestTracingOn(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		on   bool
		exp  string
	}{
		{name: "nothing set", env: nil},
		{name: "an OTLP endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true, exp: "otlp"},
		{name: "a traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true, exp: "otlp"},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true, exp: "console"},
		{name: "none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}},
		{name: "SDK disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "only a service name", env: map[string]string{"OTEL_SERVICE_NAME": "recon-eu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on, exp := tracingOn(func(k string) string { return tt.env[k] })
			if on != tt.on || exp != tt.exp {
				t.Errorf("tracingOn = %v %q, want %v %q", on, exp, tt.on, tt.exp)
			}
		})
	}
}

// TestStreamsNearFull: /readyz's streams check is degraded, never failing,
// from events.NearFull of a stream's max_bytes; an unbounded stream, or
// one that cannot be read (the nats check's concern), is ready.
func TestStreamsNearFull(t *testing.T) {
	usage := func(us ...events.StreamUsage) func(context.Context) ([]events.StreamUsage, error) {
		return func(context.Context) ([]events.StreamUsage, error) { return us, nil }
	}
	for _, tc := range []struct {
		name string
		read func(context.Context) ([]events.StreamUsage, error)
		want string // "" = ready
	}{
		{"room", usage(events.StreamUsage{Stream: "RECON", Bytes: 899, MaxBytes: 1000}), ""},
		{"unbounded", usage(events.StreamUsage{Stream: "RECON", Bytes: 1 << 40}), ""},
		{"near the limit", usage(events.StreamUsage{Stream: "RECON", Bytes: 100, MaxBytes: 1000}, events.StreamUsage{Stream: "RECON_WORK", Bytes: 950, MaxBytes: 1000}),
			"stream RECON_WORK holds 950 of its 1000 max bytes (95%): at the limit new events wait in the outbox (raise events.max_bytes, or find the consumer that does not take them)"},
		{"unreadable", func(context.Context) ([]events.StreamUsage, error) { return nil, errors.New("nats down") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := streamsNearFull(context.Background(), tc.read)
			var d *api.Degraded
			if (err != nil) != (tc.want != "") || err != nil && (!errors.As(err, &d) || d.Detail != tc.want) {
				t.Fatalf("streamsNearFull: got %v, want degraded %q", err, tc.want)
			}
		})
	}
}

// TestNATSReadiness: /readyz's nats check is degraded, never failing,
// while events cannot be published (they wait in the outbox, and claims
// and webhooks go on), names the kind of failure without the error's text
// (served without a token), and fails only before the relay's first
// success.
func TestNATSReadiness(t *testing.T) {
	secret := errors.New("dial tcp 10.1.2.3:4222: connection refused")
	for _, tc := range []struct {
		name     string
		status   nats.Status
		relay    error
		want     string // "" = ready
		wantFail bool
	}{
		{"connected and publishing", nats.CONNECTED, nil, "", false},
		{"not published yet", nats.CONNECTED, events.ErrRelayNotStarted, "", true},
		{"not published yet, reconnecting", nats.RECONNECTING, events.ErrRelayNotStarted, "", true},
		{"reconnecting", nats.RECONNECTING, secret, "nats reconnecting: events wait in the outbox", false},
		{"no quorum: connected, no PubAck", nats.CONNECTED, fmt.Errorf("publish: %w", secret),
			"the relay cannot publish (no PubAck; the log says why): events wait in the outbox", false},
		{"stream full", nats.CONNECTED, fmt.Errorf("publish: %w", events.ErrStreamFull), "the stream is full: events wait in the outbox", false},
		{"outbox unreadable", nats.CONNECTED, fmt.Errorf("read outbox: %w", ledger.ErrUnavailable),
			"the relay cannot read the outbox: events wait in the outbox", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := natsReadiness(tc.status, tc.relay)
			var d *api.Degraded
			switch {
			case tc.wantFail:
				if err == nil || errors.As(err, &d) {
					t.Fatalf("natsReadiness: got %v, want a failure", err)
				}
			case (err != nil) != (tc.want != "") || err != nil && (!errors.As(err, &d) || d.Detail != tc.want):
				t.Fatalf("natsReadiness: got %v, want degraded %q", err, tc.want)
			}
		})
	}
}
