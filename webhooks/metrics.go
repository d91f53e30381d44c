package webhooks

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/internal/promreg"

	"github.com/agentledger/reconciler/ledger"
)

// Results of reconciler_webhooks_total beyond the ledger's IngestOutcomes.
const (
	resultBadSignature = "bad_signature"
	resultStale        = "stale"
	resultTooLarge     = "too_large"
	resultUnparsable   = "unparsable"
	resultInvalid      = "invalid"     // verified, but the ledger refused its shape
	resultUnavailable  = "unavailable" // the store (or PayPal, for a certificate) did not answer
	resultNotFound     = "unknown_endpoint"
	resultChallenge    = "challenge" // a verified handshake, answered, nothing stored
	resultError        = "error"
)

// metrics are the webhook collectors; names and labels are the contract of
// docs/architecture.md §6a. alerts and transitions are shared with the API and
// the resolver: whoever registers first owns them.
type metrics struct {
	webhooks    *prometheus.CounterVec
	alerts      *prometheus.CounterVec
	transitions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	var err error
	if m.webhooks, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reconciler_webhooks_total", Help: "Webhook deliveries by vendor and result.",
	}, []string{"vendor", "result"})); err != nil {
		return nil, err
	}
	if m.alerts, err = promreg.Register(reg, promreg.NewAlerts()); err != nil {
		return nil, err
	}
	if m.transitions, err = promreg.Register(reg, promreg.NewTransitions()); err != nil {
		return nil, err
	}
	return m, nil
}

// ingested counts one stored delivery: its result, its transition and its alerts.
func (m *metrics) ingested(vendor string, res ledger.IngestResult) {
	m.webhooks.WithLabelValues(vendor, string(res.Outcome)).Inc()
	if ch := res.Change; ch.Changed {
		m.transitions.WithLabelValues(string(ch.From), string(ch.To), string(ledger.SourceWebhook)).Inc()
	}
	for _, k := range res.Change.Alerts {
		m.alerts.WithLabelValues(string(k)).Inc()
	}
}
