package resolver

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the resolver's part of ARCHITECTURE.md §6a.
type metrics struct {
	cycle   prometheus.Histogram
	actions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reconciler_resolver_cycle_seconds",
			Help:    "Time one resolver pass took.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_resolver_actions_total",
			Help: "What the resolver did to due rows, by vendor and action (found, replayed, absent, paged, error).",
		}, []string{"vendor", "action"}),
	}
	if reg == nil {
		return m
	}
	m.cycle = register(reg, m.cycle, log)
	m.actions = register(reg, m.actions, log)
	return m
}

// register registers c, or reuses the collector already registered under
// its name (a second resolver on one registry, as in tests).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
		log.Warn("resolver: metric registered with another type", "err", err)
	default:
		log.Warn("resolver: metric not registered", "err", err)
	}
	return c
}
