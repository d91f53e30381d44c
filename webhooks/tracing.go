package webhooks

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// The webhook span (docs/architecture.md §12): the server's span of the
// delivery's request, which the API's tracing starts (a new trace: a
// sender's traceparent is only linked), named webhook here, with the
// endpoint, the vendor's event id and type, the result a metric counts,
// and — once stored — the row's attributes and a link to its claim. The
// body, the signature headers and the secrets never reach it. Without a
// recording span every call here is a SpanFromContext and a check.

const (
	keyEndpoint  = attribute.Key("reconciler.webhook.endpoint")
	keyEventType = attribute.Key("reconciler.webhook.event_type")
)

// nameDelivery names the delivery's span.
func nameDelivery(ctx context.Context) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetName("webhook")
	}
}

// traceVerified records a delivery that passed verification.
func traceVerified(ctx context.Context, ep *endpoint, ev Event) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.KeyVendor.String(ep.vendor), keyEndpoint.String(ep.name),
			tracing.KeyVendorEventID.String(ev.ID), keyEventType.String(ev.Type))
	}
}

// traceResult records the delivery's result (the result label of
// reconciler_webhooks_total) and the row it changed, if any.
func traceResult(ctx context.Context, result string, row *ledger.Row) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if row == nil {
		span.SetAttributes(tracing.KeyResult.String(result))
		return
	}
	tracing.Annotate(span, *row, tracing.KeyResult.String(result))
}

// count counts a delivery's result and puts it on its span.
func (h *Handler) count(ctx context.Context, vendor, result string) {
	h.metrics.webhooks.WithLabelValues(vendor, result).Inc()
	traceResult(ctx, result, nil)
}
