package events_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/oteltest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// BenchmarkRelayTraced measures what the publish span costs the relay, in
// one run: the relay as serve runs it on the embedded server (sync every
// second, the default window) with tracing off (no TracerProvider: the
// events carry their row's traceparent header only), with an SDK provider
// whose exporter drops the spans (what the publish span costs the relay's
// loop), and with one exporting every span over OTLP/HTTP, batched, to a
// receiver in the test that reads and drops the requests (what the
// export adds on the same two cores). BENCHMARKS.md has the figures.
func BenchmarkRelayTraced(b *testing.B) {
	for _, mode := range []string{"off", "otlp", "sdk_noop_exporter"} {
		b.Run(mode, func(b *testing.B) {
			js := benchJS(b, false, natsserver.DefaultSyncInterval)
			st := natstest.EnsureStream(b, js)
			out := newFakeOutbox()
			evs := make([]ledger.Event, b.N)
			for i := range evs {
				evs[i] = natstest.Event(i, "succeeded")
				evs[i].Traceparent = claimTP
			}
			var tp trace.TracerProvider
			if mode == "otlp" {
				tp = oteltest.OTLPProvider(b)
			}
			if mode == "sdk_noop_exporter" {
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			}
			r, err := events.NewRelay(out, js, events.RelayOptions{TracerProvider: tp})
			if err != nil {
				b.Fatal(err)
			}
			runRelay(b, r)
			b.ResetTimer()
			out.add(evs...)
			testkit.EventuallyWithin(b, 10*time.Minute, "every record published", func() bool { return natstest.StreamCount(b, st) == uint64(b.N) })
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
