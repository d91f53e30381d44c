package eventsprom_test

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/eventsprom"
)

var _ events.RelayMetrics = (*eventsprom.RelayMetrics)(nil)

// TestRelayMetrics checks the series of docs/architecture.md §6a: names, types
// and labels are the contract dashboards are written against.
func TestRelayMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := eventsprom.NewRelayMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second relay on the same registry counts into the same series.
	m2, err := eventsprom.NewRelayMetrics(reg)
	if err != nil {
		t.Fatalf("second registration: %v", err)
	}
	m.SetOutboxDepth(7)
	m.ObserveLag(1500 * time.Millisecond)
	m2.ObserveLag(time.Millisecond)
	m.CountResult(events.ResultPublished)
	m2.CountResult(events.ResultPublished)
	m.CountResult(events.ResultInvalid)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	if len(mfs) != 3 {
		t.Errorf("registered %d families, want 3", len(mfs))
	}
	family := func(name string) int {
		for i, mf := range mfs {
			if mf.GetName() == name {
				return i
			}
		}
		t.Fatalf("%s not registered", name)
		return -1
	}

	depth := mfs[family("reconciler_outbox_depth")]
	if depth.GetType().String() != "GAUGE" || depth.GetMetric()[0].GetGauge().GetValue() != 7 {
		t.Errorf("reconciler_outbox_depth: got %v, want gauge 7", depth)
	}

	lag := mfs[family("reconciler_relay_lag_seconds")]
	if lag.GetType().String() != "HISTOGRAM" {
		t.Fatalf("reconciler_relay_lag_seconds: got %v, want a histogram", lag.GetType())
	}
	h := lag.GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-1.501) > 1e-9 {
		t.Errorf("reconciler_relay_lag_seconds: got count %d sum %v, want 2 and 1.501", h.GetSampleCount(), h.GetSampleSum())
	}
	if b := h.GetBucket(); len(b) != 10 || b[0].GetUpperBound() != 0.001 {
		t.Errorf("reconciler_relay_lag_seconds buckets: got %v, want 10 from 1 ms", b)
	}

	pubs := mfs[family("reconciler_relay_publishes_total")]
	if pubs.GetType().String() != "COUNTER" {
		t.Fatalf("reconciler_relay_publishes_total: got %v, want a counter", pubs.GetType())
	}
	counts := map[string]float64{}
	for _, mm := range pubs.GetMetric() {
		if l := mm.GetLabel(); len(l) != 1 || l[0].GetName() != "result" {
			t.Fatalf("reconciler_relay_publishes_total labels: got %v, want result", l)
		}
		counts[mm.GetLabel()[0].GetValue()] = mm.GetCounter().GetValue()
	}
	if counts[events.ResultPublished] != 2 || counts[events.ResultInvalid] != 1 || len(counts) != 2 {
		t.Errorf("reconciler_relay_publishes_total: got %v, want published 2, invalid 1", counts)
	}
}

func TestNewRelayMetricsNeedsRegisterer(t *testing.T) {
	if _, err := eventsprom.NewRelayMetrics(nil); err == nil {
		t.Fatal("NewRelayMetrics(nil): got nil error")
	}
}
