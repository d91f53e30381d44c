package events

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// HeaderTraceparent is the message header that carries an event's W3C
// trace context (docs/architecture.md §12): the relay's publish span when
// the relay traces, else the claim's traceparent the row keeps. NATS
// headers are case-sensitive; this is the W3C spelling.
const HeaderTraceparent = "traceparent"

// ResumeContext returns ctx carrying the trace context of ev — the one
// its message carried, which Await puts in ev.Traceparent — as the
// remote parent of the spans the caller starts next: a run resumed by an
// event continues the trace of the claim it waited on. Without one it
// returns ctx.
func ResumeContext(ctx context.Context, ev ledger.Event) context.Context {
	return tracing.ContextWithParent(ctx, ev.Traceparent)
}

// The publish span: one per message sent (a retry is a new one), a
// producer span child of the row's claim — so the trace of the agent's
// tool call reaches the run that waits for the event — with the
// messaging conventions (messaging.system nats), the event's attributes,
// and its result at the PubAck. Started in Relay.publish, ended in
// Relay.settle; neither runs any of it without a tracer.

const (
	keyStream     = attribute.Key("reconciler.stream")
	tracerScope   = "github.com/agentledger/reconciler/events"
	publishName   = "publish"
	messagingNATS = "nats"
)

// startPublish starts e's publish span and puts its context in msg's
// traceparent header.
func (r *Relay) startPublish(e *entry, msg *nats.Msg, stream string) {
	ctx := tracing.ContextWithParent(context.Background(), e.rec.Event.Traceparent)
	// The attributes go in with the start, in one allocation: this runs
	// for every message the relay sends.
	attrs := append(tracing.EventAttributes(e.rec.Event, 8),
		messagingSystem, messagingOperation, semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(msg.Subject),
		semconv.MessagingMessageID(msg.Header.Get(jetstream.MsgIDHeader)),
		semconv.MessagingMessageBodySize(len(msg.Data)),
		keyStream.String(stream),
	)
	_, span := r.tracer.Start(ctx, publishName, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	if tp := tracing.Traceparent(span.SpanContext()); tp != "" {
		msg.Header.Set(HeaderTraceparent, tp)
	}
	e.span = span
}

var (
	messagingSystem    = semconv.MessagingSystemKey.String("nats")
	messagingOperation = semconv.MessagingOperationName(publishName)
)

// endPublish ends e's publish span with its result: the PubAck's
// (published or duplicate) or the error that left the record pending.
func endPublish(e *entry, result string, err error) {
	if e.span == nil {
		return
	}
	e.span.SetAttributes(tracing.KeyResult.String(result))
	if err != nil {
		msg := "not published"
		if errors.Is(err, errPublishTimeout) {
			msg = errPublishTimeout.Error()
		}
		e.span.SetStatus(codes.Error, msg)
	}
	e.span.End()
	e.span = nil
}
