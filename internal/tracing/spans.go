package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracer is tp's tracer of the package scope names, or a no-op one when
// tp is nil: the packages that take a TracerProvider option start their
// spans unconditionally and let an absent provider make them free.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	if tp == nil {
		return noop.NewTracerProvider().Tracer(scope)
	}
	return tp.Tracer(scope)
}

// Page actions, the reconciler.page.action of a page span.
const (
	PageTrigger = "trigger"
	PageResolve = "resolve"
)

const (
	keyPageAction   = attribute.Key("reconciler.page.action")
	keyPageDedupKey = attribute.Key("reconciler.page.dedup_key")
)

// StartPage starts a page span (§12): a client span — the pager is a
// remote service — under ctx's span, linked to the claim tp names, with
// the action (PageTrigger, PageResolve) and the dedup key. Nothing else of
// the page goes on it: a summary or its details are for the human.
func StartPage(ctx context.Context, t trace.Tracer, action, dedupKey, tp string) (context.Context, trace.Span) {
	opts := append(ClaimLinks(tp), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(keyPageAction.String(action), keyPageDedupKey.String(dedupKey)))
	return t.Start(ctx, "page", opts...)
}

// End ends span, marking it failed with description when err is not nil.
// The error's text never goes on the span: a pager's or a vendor's error
// may quote its URL, and a Slack hook's URL is its secret.
func End(span trace.Span, err error, description string) {
	if err != nil {
		span.SetStatus(codes.Error, description)
	}
	span.End()
}
