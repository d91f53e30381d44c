package resolver

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/promreg"
	"github.com/agentledger/reconciler/ledger"
)

// metrics are the resolver's part of docs/architecture.md §6a.
type metrics struct {
	cycle       prometheus.Histogram
	actions     *prometheus.CounterVec
	transitions *prometheus.CounterVec
	alerts      *prometheus.CounterVec
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
		// The same series as the API's and the webhooks': registered by
		// whoever comes first, counted into by all.
		transitions: promreg.NewTransitions(),
		alerts:      promreg.NewAlerts(),
	}
	if reg == nil {
		return m
	}
	m.cycle = register(reg, m.cycle, log)
	m.actions = register(reg, m.actions, log)
	m.transitions = register(reg, m.transitions, log)
	m.alerts = register(reg, m.alerts, log)
	return m
}

// change counts what one Apply did: its transition and its alerts.
func (m *metrics) change(ch ledger.Change) {
	if ch.Changed {
		m.transitions.WithLabelValues(string(ch.From), string(ch.To), string(ledger.SourceResolver)).Inc()
	}
	for _, a := range ch.Alerts {
		m.alerts.WithLabelValues(string(a)).Inc()
	}
}

// register registers c, or reuses the collector already registered under
// its name; a failure is logged, and the resolver counts into an
// unregistered collector rather than refusing to run.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	got, err := promreg.Register(reg, c)
	if err != nil {
		log.Warn("resolver: metric not registered", "err", err)
		return c
	}
	return got
}
