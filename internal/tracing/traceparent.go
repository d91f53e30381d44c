package tracing

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/ledger"
)

// Traceparent formats sc as the W3C traceparent a row keeps (version 00),
// or "" for an invalid span context: a service that does not trace stores
// nothing.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// SpanContext parses a traceparent a row or an event keeps into a remote
// span context; false for "" or anything ledger.ValidateTraceparent
// refuses.
func SpanContext(tp string) (trace.SpanContext, bool) {
	if tp == "" || ledger.ValidateTraceparent(tp) != nil {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	var flags [1]byte
	_, err3 := hex.Decode(flags[:], []byte(tp[53:55]))
	if err1 != nil || err2 != nil || err3 != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, Remote: true,
		TraceFlags: trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom),
	})
	return sc, sc.IsValid()
}

// ContextWithParent returns ctx with tp's span context as the remote
// parent of the spans started from it; ctx itself when tp is not one.
func ContextWithParent(ctx context.Context, tp string) context.Context {
	sc, ok := SpanContext(tp)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// LinkClaim links span to the claim span tp names (a row's Traceparent),
// unless span is that claim span or tp names none. Links added after a
// span started are not seen by a sampler; the span's own sampling stands.
func LinkClaim(span trace.Span, tp string) {
	sc, ok := SpanContext(tp)
	if !ok || !span.IsRecording() || sc.SpanID() == span.SpanContext().SpanID() {
		return
	}
	span.AddLink(trace.Link{SpanContext: sc, Attributes: claimLink})
}

// ClaimLinks are the span start options that link a new span to the claim
// span tp names (none when tp names none): for spans started outside any
// request, so the sampler sees the link.
func ClaimLinks(tp string) []trace.SpanStartOption {
	sc, ok := SpanContext(tp)
	if !ok {
		return nil
	}
	return []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc, Attributes: claimLink})}
}

// claimLink marks a link to a row's claim span.
var claimLink = []attribute.KeyValue{KeyLink.String("claim")}
