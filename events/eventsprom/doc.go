// Package eventsprom exports the outbox relay's observations to Prometheus:
// NewRelayMetrics returns the events.RelayMetrics that cmd/reconciler gives
// the relay, so /metrics carries (docs/architecture.md §6a):
//
//   - reconciler_outbox_depth, a gauge: the records the relay saw pending at
//     its last read (capped at one batch);
//   - reconciler_relay_lag_seconds, a histogram (1 ms to about 4.4 min):
//     from an event's commit to its JetStream PubAck;
//   - reconciler_relay_publishes_total{result}, a counter: records handled,
//     by result (published, duplicate, error, invalid).
//
// It lives outside events so that events, and the client SDK that awaits
// through it, do not link Prometheus.
//
// Imports: internal/promreg and the Prometheus client; not events (the
// relay's interface is satisfied structurally). A RelayMetrics is safe for
// concurrent use, so relays may share one.
package eventsprom
