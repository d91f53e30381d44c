package resolver

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// The resolver's spans (docs/architecture.md §12): one resolve span per
// row and pass — a root, since a pass answers no request, linked to the
// row's claim and carrying the row's attributes, what the pass did to it
// (reconciler.resolver.actions) and the status it left — and under it a
// page span for each page sent or resolved. The vendor's own calls are
// client spans under the resolve span when the lookups' HTTP clients are
// instrumented (cmd/reconciler does, with otelhttp). Errors are recorded
// as a status without their text, which may quote a vendor's answer.
// Without a TracerProvider the spans come from a no-op tracer.

const (
	tracerScope     = "github.com/agentledger/reconciler/resolver"
	keyActions      = attribute.Key("reconciler.resolver.actions")
	keyPaused       = attribute.Key("reconciler.resolver.vendor_paused")
	keyNextCheck    = attribute.Key("reconciler.resolver.next_check_at")
	errorMessage    = "row not resolved"
	pageUndelivered = "page not delivered"
)

func tracerOf(tp trace.TracerProvider) trace.Tracer { return tracing.Tracer(tp, tracerScope) }

// startResolve starts the resolve span of row.
func (r *Resolver) startResolve(ctx context.Context, row ledger.Row) (context.Context, trace.Span) {
	opts := append(tracing.ClaimLinks(row.Traceparent), trace.WithNewRoot())
	ctx, span := r.tracer.Start(ctx, "resolve", opts...)
	if span.IsRecording() {
		span.SetAttributes(tracing.RowAttributes(row)...)
	}
	return ctx, span
}

// endResolve ends span with what the pass did.
func endResolve(span trace.Span, out outcome) {
	if span.IsRecording() {
		span.SetAttributes(keyActions.StringSlice(out.actions))
		if out.settled {
			span.SetAttributes(tracing.KeyStatus.String(string(out.status)))
		}
		if !out.next.IsZero() {
			span.SetAttributes(keyNextCheck.String(out.next.UTC().Format(time.RFC3339Nano)))
		}
		if out.err != nil {
			span.SetStatus(codes.Error, errorMessage)
		}
	}
	span.End()
}
