package api_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/internal/oteltest"
)

// BenchmarkClaimAPITraced is BenchmarkClaimAPI with tracing off (no
// TracerProvider), on with an SDK provider whose exporter drops the spans
// (the request path's own cost), and on batching every span over
// OTLP/HTTP to a receiver in the test that reads and drops the requests,
// in one run, so all share the machine's conditions.
func BenchmarkClaimAPITraced(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchClaims(b, api.Options{}) })
	b.Run("sdk_noop_exporter", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		benchClaims(b, api.Options{TracerProvider: tp})
	})
	b.Run("otlp", func(b *testing.B) {
		benchClaims(b, api.Options{TracerProvider: oteltest.OTLPProvider(b)})
	})
}
