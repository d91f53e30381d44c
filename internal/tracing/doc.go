// Package tracing holds what the service's adapters and the client SDK
// share about traces (docs/architecture.md §12): the attribute names of a
// row on a span (the seed's ledger fields, plus the GenAI tool
// conventions), the W3C traceparent a row keeps — formatted from a span
// context and parsed back into one for links and parents — and a
// slog.Handler that puts trace_id and span_id on records logged with a
// span in their context.
//
// Nothing here starts a span or decides whether tracing is on: each
// adapter starts its own spans from the TracerProvider it is given, and
// with none it starts none. Attribute lists are built only for a
// recording span, so a service that does not trace pays a nil check or a
// SpanFromContext per call, not an allocation.
//
// No attribute carries a secret: tokens, webhook secrets, signatures and
// request or webhook bodies never reach a span (the e2e test of
// cmd/reconciler checks every exported attribute).
//
// Imports: ledger and the OpenTelemetry API (go.opentelemetry.io/otel,
// /attribute, /trace) only — never the SDK or an exporter, because the
// client SDK links this package into agent runtimes (make lint checks).
//
// Concurrency: every function is safe for concurrent use; the handler is
// as safe as the one it wraps.
package tracing
