package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/ledger"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestDoAnnotatesToolSpan: Do puts the row's §12 attributes and the
// decision on the runtime's tool span, and every request it sends carries
// that span, so the API's claim and outcome spans are its children.
func TestDoAnnotatesToolSpan(t *testing.T) {
	server := tracetest.NewSpanRecorder()
	e := newEnv(t, func(o *api.Options) {
		o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(server))
	})
	runtime := tracetest.NewSpanRecorder()
	ctx, tool := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(runtime)).Tracer("agent").Start(context.Background(), "tool call")
	v := newFakeStripe(t, fakestripe.FaultHang)
	c := e.client(t, client.WithCallTimeout(200*time.Millisecond))
	out, err := c.Do(ctx, chargeClaim(1050), v.httpCall(keyedHTTP(0)))
	if !errors.Is(err, client.ErrUnsettled) {
		t.Fatalf("Do: %v, want unsettled (the call timed out)", err)
	}
	tool.End()

	spans := runtime.Ended()
	if len(spans) != 1 {
		t.Fatalf("runtime spans %v: Do must annotate the tool span, not start one", spans)
	}
	a := spanAttrs(spans[0])
	for k, v := range map[string]string{
		"reconciler.idempotency_key": out.Key, "reconciler.metadata_local_id": out.LocalID, "reconciler.status": "unknown",
		"reconciler.decision": "proceed", "reconciler.attempt": "1", "reconciler.tenant": "acme", "reconciler.run_id": "run_1",
		"gen_ai.tool.name": "stripe.payment_intents.create", "gen_ai.tool.call.id": "call_1", "gen_ai.operation.name": "execute_tool",
	} {
		if a[k] != v {
			t.Errorf("tool span %s = %q, want %q", k, a[k], v)
		}
	}
	if d := spans[0].Status().Description; d != "unsettled" {
		t.Errorf("tool span status %q, want unsettled", d)
	}
	want := tool.SpanContext()
	names := map[string]bool{}
	for _, s := range server.Ended() {
		names[s.Name()] = true
		if s.Parent().SpanID() != want.SpanID() || s.SpanContext().TraceID() != want.TraceID() {
			t.Errorf("server span %s: parent %v, want the tool span %v", s.Name(), s.Parent(), want)
		}
	}
	if !names["claim"] || !names["outcome"] {
		t.Errorf("server spans %v, want claim and outcome", names)
	}
}

// TestDoStartsToolSpan: with no span in its context, Do starts an
// execute_tool span from the global TracerProvider; with the global no-op
// one (no SDK in the runtime), nothing is sent or recorded.
func TestDoStartsToolSpan(t *testing.T) {
	server := tracetest.NewSpanRecorder()
	e := newEnv(t, func(o *api.Options) {
		o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(server))
	})
	c := e.client(t)
	v := newFakeStripe(t)

	if _, err := c.Do(context.Background(), chargeClaim(1), v.httpCall(keyedHTTP(0))); err != nil {
		t.Fatal(err)
	}
	for _, s := range server.Ended() {
		if s.Parent().IsValid() {
			t.Errorf("without a runtime SDK, server span %s has parent %v", s.Name(), s.Parent())
		}
	}

	runtime := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(runtime)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	if _, err := c.Do(context.Background(), chargeClaim(2), v.httpCall(keyedHTTP(0))); err != nil {
		t.Fatal(err)
	}
	spans := runtime.Ended()
	if len(spans) != 1 || spans[0].Name() != "execute_tool stripe.payment_intents.create" || spans[0].SpanKind() != trace.SpanKindInternal {
		t.Fatalf("runtime spans %v", spans)
	}
	if a := spanAttrs(spans[0]); a["reconciler.status"] != "succeeded" || a["reconciler.decision"] != "proceed" {
		t.Errorf("tool span attributes %v", a)
	}
}

// TestDoSpanStatusQueued: the tool span of a queued call says so — an
// unsettled call, not an error of the runtime's — and the call is the
// worker's, not this Do's.
func TestDoSpanStatusQueued(t *testing.T) {
	e := newEnv(t, withAutonomy(0))
	c := e.client(t)
	registerCharge(t, c, ledger.AutonomyOutbox)
	runtime := tracetest.NewSpanRecorder()
	ctx, tool := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(runtime)).Tracer("agent").Start(context.Background(), "tool call")
	var calls atomic.Int32
	_, err := c.Do(ctx, outboxClaim(), countingCall(&calls, "pi_never"))
	tool.End()
	if !errors.Is(err, client.ErrQueued) || calls.Load() != 0 {
		t.Fatalf("Do of an outbox tool: %v (%d calls), want queued without a call", err, calls.Load())
	}
	spans := runtime.Ended()
	if len(spans) != 1 {
		t.Fatalf("runtime spans %v, want the tool span", spans)
	}
	if d := spans[0].Status().Description; d != "unsettled: queued" {
		t.Errorf("tool span status %q, want unsettled: queued", d)
	}
}
