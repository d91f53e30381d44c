// Package promreg holds what the packages that export Prometheus metrics
// share: registering a collector on a registry that another package may have
// registered the same series on first (api, webhooks and the resolver all
// count reconciler_transitions_total and reconciler_alerts_total).
//
// It imports only the Prometheus client. Safe for concurrent use.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector already registered
// under the same name and labels, so whoever registers first owns the series
// and everyone counts into it. Any other registration error is returned.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}

// NewTransitions returns reconciler_transitions_total{from,to,source}
// (docs/architecture.md §6a). The API, the webhooks and the resolver all count
// into this one series; declaring it once keeps their Help and labels equal,
// which Register's reuse depends on.
func NewTransitions() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reconciler_transitions_total", Help: "Row status transitions by from, to and evidence source.",
	}, []string{"from", "to", "source"})
}

// NewAlerts returns reconciler_alerts_total{kind} (docs/architecture.md §6a),
// shared like NewTransitions.
func NewAlerts() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reconciler_alerts_total", Help: "Anomalies recorded on rows, by kind.",
	}, []string{"kind"})
}
