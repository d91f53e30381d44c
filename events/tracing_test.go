package events_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/internal/tracing"
)

const claimTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestRelayPublishSpan: a traced relay publishes each event in a producer
// span that is a child of the row's claim, with the messaging
// conventions, and puts that span's context in the message's traceparent
// header, which Await returns and ResumeContext continues.
func TestRelayPublishSpan(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	natstest.EnsureStream(t, js)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	out := newFakeOutbox()
	r, err := events.NewRelay(out, js, events.RelayOptions{TracerProvider: tp, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	defer stop()
	ev := natstest.Event(1, "succeeded")
	ev.Traceparent = claimTP
	out.add(ev)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := events.Await(ctx, js, ev.Tenant, ev.RunID, ev.Key)
	if err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "publish span ended", func() bool { return len(rec.Ended()) == 1 })
	span := rec.Ended()[0]
	if span.Name() != "publish" || span.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("span %q kind %v", span.Name(), span.SpanKind())
	}
	if p := tracing.Traceparent(span.Parent()); p != claimTP {
		t.Errorf("publish span's parent %q, want the claim %q", p, claimTP)
	}
	if want := tracing.Traceparent(span.SpanContext()); got.Traceparent != want {
		t.Errorf("Await's traceparent %q, want the publish span's %q", got.Traceparent, want)
	}
	a := map[string]string{}
	for _, kv := range span.Attributes() {
		a[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{
		"messaging.system": "nats", "messaging.operation.name": "publish", "messaging.operation.type": "send",
		"messaging.destination.name": "recon.acme.run-1.succeeded", "messaging.message.id": "acme:key-0001:succeeded",
		"reconciler.idempotency_key": "key-0001", "reconciler.result": "published", "reconciler.stream": "RECON",
	} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	resumed := trace.SpanContextFromContext(events.ResumeContext(context.Background(), got))
	if resumed.TraceID() != span.SpanContext().TraceID() || resumed.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("ResumeContext continues %v, want the publish span", resumed)
	}
}

// TestRelayUntracedCarriesRowTraceparent: without a tracer the message
// carries the row's own traceparent, so a traced runtime still joins the
// claim's trace; an event without one carries none.
func TestRelayUntracedCarriesRowTraceparent(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	r, err := events.NewRelay(out, js, events.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer runRelay(t, r)()
	traced, plain := natstest.Event(1, "succeeded"), natstest.Event(2, "succeeded")
	traced.Traceparent = claimTP
	out.add(traced, plain)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ key, want string }{{traced.Key, claimTP}, {plain.Key, ""}} {
		got, err := events.Await(ctx, js, "acme", "run-1", tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if got.Traceparent != tc.want {
			t.Errorf("%s: traceparent %q, want %q", tc.key, got.Traceparent, tc.want)
		}
	}
	if ctx := events.ResumeContext(context.Background(), plain); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("ResumeContext made up a trace for an event without one")
	}
}
