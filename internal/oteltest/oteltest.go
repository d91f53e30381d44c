// Package oteltest holds what the benchmarks that price tracing share: an
// SDK TracerProvider exporting over real OTLP/HTTP to a receiver that
// discards what it gets. It serves _test.go files only.
package oteltest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// OTLPProvider is an SDK TracerProvider batching its spans over OTLP/HTTP
// to a receiver in the process that discards them; it is shut down
// (flushing) when tb ends.
func OTLPProvider(tb testing.TB) *sdktrace.TracerProvider {
	tb.Helper()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	tb.Cleanup(recv.Close)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
	if err != nil {
		tb.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}
