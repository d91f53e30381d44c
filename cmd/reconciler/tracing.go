package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Traces (docs/architecture.md §12) are off unless OTEL_TRACES_EXPORTER or
// an OTLP endpoint variable is set: then serve builds one SDK
// TracerProvider and hands it to the API, the relay, the resolver and the
// approval jobs, which start their spans from it; with none they start
// none (no provider at all, not even the global no-op: the claim path
// stays as it was). The exporter is autoexport's (OTEL_TRACES_EXPORTER
// otlp, the default, or console; OTEL_EXPORTER_OTLP_PROTOCOL
// http/protobuf, the default, or grpc), batched (OTEL_BSP_*), sampled by
// OTEL_TRACES_SAMPLER (default parentbased_always_on), with the resource
// of OTEL_SERVICE_NAME (default reconciler) and OTEL_RESOURCE_ATTRIBUTES.
// Whether tracing is on is read through Main.Getenv, like every other
// setting; the SDK reads the details from the process's environment, as
// every OpenTelemetry SDK does (the same thing for the binary).

// tracingOn reports whether the OTEL_* variables ask for traces, and the
// exporter's name for the start-up log.
func tracingOn(getenv func(string) string) (bool, string) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, ""
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); {
	case exp == "none":
		return false, ""
	case exp != "":
		return true, exp
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		return true, "otlp"
	}
	return false, ""
}

// startTracing returns the service's TracerProvider, nil when tracing is
// off. Its Shutdown, which exports the spans still batched, runs in the
// last stage of Close, after every component that may end a span.
func (m *Main) startTracing(ctx context.Context) (trace.TracerProvider, error) {
	on, exporter := tracingOn(m.getenv)
	if !on {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	res, err := resource.New(ctx,
		// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read last, win.
		resource.WithAttributes(semconv.ServiceName("reconciler"), semconv.ServiceVersion(buildVersion())),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("traces: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// The SDK reports export failures (a collector down) here, once per
	// batch: into the service's log, not the SDK's own stderr logger.
	log := m.Logger.With("component", "traces")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	m.onClose(stageTraces, "traces", tp.Shutdown)
	m.Logger.Info("tracing on", "exporter", exporter)
	return tp, nil
}

// buildVersion is the module version the binary was built from, or
// "devel".
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// vendorClient is the HTTP client of the resolver's vendor lookups: with
// tracing, each call is a client span under its row's resolve span
// (otelhttp), and no trace context is sent to the vendor — a trace's ids
// are ours, not Stripe's. Nil without tracing: the lookups' own default.
func vendorClient(tp trace.TracerProvider) *http.Client {
	if tp == nil {
		return nil
	}
	return &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
	)}
}
