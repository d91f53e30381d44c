package client

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
)

// Traces (docs/architecture.md §12), with the OpenTelemetry API only: the
// runtime brings the SDK and its exporter, and sets the global
// TracerProvider as OpenTelemetry's instrumentation expects.
//
// Do annotates the runtime's tool span — the span in its context, when it
// records — with the row's attributes (the same §12 list the service's
// spans carry) and the decision; with none, it starts a GenAI-style
// "execute_tool <tool>" span of its own from the global TracerProvider
// (none, and nothing is recorded). Every request the client sends carries
// the context's span in a W3C traceparent header, so the service's claim
// span is a child of the tool span. A runtime resumed by an event
// continues the trace with events.ResumeContext.

const tracerScope = "github.com/agentledger/reconciler/client"

// The GenAI semantic conventions' operation of a tool call (semconv v1.40).
var (
	keyOperation  = attribute.Key("gen_ai.operation.name")
	operationTool = keyOperation.String("execute_tool")
)

// propagator is what the client sends: the W3C trace context, which the
// service honours, whatever the runtime's global propagator is.
var propagator = propagation.TraceContext{}

// injectTrace puts ctx's span context on req (nothing without one).
func injectTrace(ctx context.Context, req *http.Request) {
	propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
}

// traceTool returns the context Do runs in — ctx, or ctx with Do's own
// tool span — and the func that records how Do ended.
func traceTool(ctx context.Context, claim ClaimRequest) (context.Context, func(Outcome, error)) {
	span := trace.SpanFromContext(ctx)
	own := !span.IsRecording()
	if own {
		ctx, span = otel.GetTracerProvider().Tracer(tracerScope).Start(ctx, "execute_tool "+claim.Tool,
			trace.WithSpanKind(trace.SpanKindInternal))
	}
	if span.IsRecording() {
		span.SetAttributes(operationTool, tracing.KeyToolName.String(claim.Tool), tracing.KeyToolCallID.String(claim.ToolCallID),
			tracing.KeyRunID.String(claim.RunID))
	}
	return ctx, func(out Outcome, err error) {
		if span.IsRecording() {
			switch {
			case out.Row.Key != "":
				span.SetAttributes(tracing.RowAttributes(out.Row, tracing.KeyDecision.String(string(out.Decision)))...)
			case out.Decision != "":
				span.SetAttributes(tracing.KeyDecision.String(string(out.Decision)))
			}
			if err != nil {
				// A category, never the error's text: a vendor's error may
				// quote its answer or the request.
				span.SetStatus(codes.Error, errorKind(err))
			}
		}
		if own {
			span.End()
		}
	}
}

// errorKind names how Do failed, for the span's status.
func errorKind(err error) string {
	var se *StopError
	switch {
	case errors.As(err, &se):
		return "stop: " + se.Code
	case errors.Is(err, ErrEscalated):
		return "unsettled: escalated"
	case errors.Is(err, ErrQueued): // before ErrUnsettled: it matches that too
		return "unsettled: queued"
	case errors.Is(err, ErrAwaitingApproval):
		return "unsettled: awaiting approval"
	case errors.Is(err, ErrUnsettled):
		return "unsettled"
	case errors.Is(err, ErrNoKey):
		return "no key"
	}
	var ae *Error
	if errors.As(err, &ae) {
		return "api: " + ae.Code
	}
	return "error"
}
