package eventsprom

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/promreg"
)

// RelayMetrics implements events.RelayMetrics with Prometheus collectors.
type RelayMetrics struct {
	depth     prometheus.Gauge
	oldest    prometheus.Gauge
	lag       prometheus.Histogram
	publishes *prometheus.CounterVec
}

// NewRelayMetrics registers the relay's metrics on reg. A series already
// registered there (by another relay) is reused, so relays sharing reg count
// into the same series.
func NewRelayMetrics(reg prometheus.Registerer) (*RelayMetrics, error) {
	if reg == nil {
		return nil, errors.New("relay metrics: a registerer is required")
	}
	m := &RelayMetrics{
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reconciler_outbox_depth",
			Help: "Outbox records waiting to be published.",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reconciler_outbox_oldest_seconds",
			Help: "How long the oldest outbox record waiting to be published has waited since its commit.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reconciler_relay_lag_seconds",
			Help:    "Time from an event's commit (event.at) to its JetStream PubAck.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms .. ~4.4 min
		}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_relay_publishes_total",
			Help: "Outbox records the relay handled, by result (published, duplicate, error, invalid).",
		}, []string{"result"}),
	}
	var err error
	if m.depth, err = promreg.Register(reg, m.depth); err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	if m.oldest, err = promreg.Register(reg, m.oldest); err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	if m.lag, err = promreg.Register(reg, m.lag); err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	if m.publishes, err = promreg.Register(reg, m.publishes); err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	return m, nil
}

// SetOutboxDepth sets reconciler_outbox_depth.
func (m *RelayMetrics) SetOutboxDepth(n int) { m.depth.Set(float64(n)) }

// SetOutboxOldest sets reconciler_outbox_oldest_seconds.
func (m *RelayMetrics) SetOutboxOldest(d time.Duration) { m.oldest.Set(d.Seconds()) }

// ObserveLag observes d in reconciler_relay_lag_seconds.
func (m *RelayMetrics) ObserveLag(d time.Duration) { m.lag.Observe(d.Seconds()) }

// CountResult adds one to reconciler_relay_publishes_total{result}.
func (m *RelayMetrics) CountResult(result string) { m.publishes.WithLabelValues(result).Inc() }
