package approvals

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// The approval gate's spans (docs/architecture.md §12): the Expirer's
// approval span per request it expires — a root (no request asked for
// it) linked to the row's claim, with the row and the approval's id and
// state — and the Notifier's page span per pager asked (tracing.StartPage:
// a root, linked to the claim). A grant or a denial is the API's approval
// span. Errors are a status without their text. Without a TracerProvider
// the spans come from a no-op tracer.

const tracerScope = "github.com/agentledger/reconciler/approvals"

func tracerOf(tp trace.TracerProvider) trace.Tracer { return tracing.Tracer(tp, tracerScope) }

// startExpiry starts the approval span of expiring row's request.
func (x *Expirer) startExpiry(ctx context.Context, row ledger.Row) (context.Context, trace.Span) {
	opts := append(tracing.ClaimLinks(row.Traceparent), trace.WithNewRoot())
	ctx, span := x.tracer.Start(ctx, "approval", opts...)
	if span.IsRecording() {
		span.SetAttributes(tracing.KeyApprovalID.String(row.Approval.ID))
	}
	return ctx, span
}

// endExpiry ends it with the row as the expiry left it.
func endExpiry(span trace.Span, got ledger.Row, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			span.SetStatus(codes.Error, "approval not expired")
		case got.Key != "" && got.Approval != nil:
			span.SetAttributes(tracing.RowAttributes(got, tracing.KeyApprovalState.String(string(got.Approval.State)))...)
		case got.Key != "":
			span.SetAttributes(tracing.RowAttributes(got)...)
		}
	}
	span.End()
}
