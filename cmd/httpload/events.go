package main

import (
	"slices"
	"time"
)

// Webhook mode's event phases, and the targets for them: the relay
// keeps up with peak ingest, and the lag from a delivery's 2xx to its
// event's arrival from the stream stays under a second at peak and under
// 100 ms at half the peak rate.
const (
	PhasePeak = "peak"
	PhaseHalf = "half"

	PeakLagP99TargetMS = 1000.0
	HalfLagP99TargetMS = 100.0
	// RelayOverIngestTarget: the events that arrived during a phase's
	// window, over the deliveries acknowledged in it. A relay that keeps up
	// delivers as many as were acknowledged (the events of the window's last
	// milliseconds arrive after it, those of the milliseconds before it
	// within it); one that cannot falls short by the share it lacks.
	RelayOverIngestTarget = 0.99
)

// TargetDurableHalf is the rate-limited durable phase: half of the peak's
// durable rate.
const TargetDurableHalf = "webhook_durable_half"

// EventsPhase is the event side of one webhook-mode phase, measured in the
// same window as its ingest.
type EventsPhase struct {
	Phase string `json:"phase"`
	// RateLimit is the phase's pacing in deliveries/s; 0 is unlimited.
	RateLimit float64 `json:"rate_limit"`
	// IngestPerSec is the durable deliveries answered 200 per second of
	// the phase's measured window; RelayPerSec the events that arrived from
	// the stream per second of the same window.
	IngestPerSec    float64 `json:"ingest_per_s"`
	RelayPerSec     float64 `json:"relay_per_s"`
	RelayOverIngest float64 `json:"relay_over_ingest"`
	// Events is how many of the window's deliveries had their event
	// arrive (each one's lag is in the percentiles).
	Events   int     `json:"events"`
	LagP50MS float64 `json:"lag_p50_ms"`
	LagP99MS float64 `json:"lag_p99_ms"`
	LagMaxMS float64 `json:"lag_max_ms"`
	// LagTargetMS is the p99 the phase must stay under; Met says whether it
	// did and the relay kept up (RelayOverIngestTarget).
	LagTargetMS float64 `json:"lag_target_ms"`
	Met         bool    `json:"met"`
}

// EventsResult is webhook mode's event delivery over the whole run.
type EventsResult struct {
	Phases []EventsPhase `json:"phases"`
	// Acked deliveries each wrote one event; Delivered of them arrived,
	// Missing did not within the drain timeout; Duplicates arrived twice
	// (both must be 0).
	Acked      int `json:"acked"`
	Delivered  int `json:"delivered"`
	Missing    int `json:"missing"`
	Duplicates int `json:"duplicates"`
	// SyncedAfterMS is how long the relay held a published record before
	// deleting it; OutboxAfterDrain must be 0 once that has passed.
	SyncedAfterMS    float64 `json:"synced_after_ms"`
	OutboxAfterDrain int     `json:"outbox_after_drain"`
	DrainMS          float64 `json:"drain_ms"`
	// Met: every phase met its targets, nothing is missing or doubled.
	Met bool `json:"met"`
}

// eventsPhase measures one phase: ingest from its target result, the relay
// from the arrivals and lags inside its spans.
func eventsPhase(name string, limit float64, tr TargetResult, spans []span, s lagSnapshot, target float64) EventsPhase {
	ph := EventsPhase{Phase: name, RateLimit: limit, IngestPerSec: tr.OpsPerSec, LagTargetMS: target}
	var window time.Duration
	for _, sp := range spans {
		window += sp.to.Sub(sp.from)
	}
	in := func(t time.Time) bool {
		return slices.ContainsFunc(spans, func(sp span) bool { return sp.contains(t) })
	}
	arrived := 0
	for _, at := range s.arrivals {
		if in(at) {
			arrived++
		}
	}
	var lags []time.Duration
	for _, sm := range s.samples {
		if in(sm.acked) {
			lags = append(lags, sm.lag)
		}
	}
	slices.Sort(lags)
	ph.Events = len(lags)
	ph.LagP50MS = ms(percentile(lags, 0.50))
	ph.LagP99MS = ms(percentile(lags, 0.99))
	ph.LagMaxMS = ms(percentile(lags, 1))
	if window > 0 {
		ph.RelayPerSec = float64(arrived) / window.Seconds()
	}
	if ph.IngestPerSec > 0 {
		ph.RelayOverIngest = ph.RelayPerSec / ph.IngestPerSec
	}
	ph.Met = ph.Events > 0 && ph.LagP99MS < target && ph.RelayOverIngest >= RelayOverIngestTarget
	return ph
}
