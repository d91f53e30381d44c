package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceparentRoundTrip(t *testing.T) {
	for _, s := range []string{tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03"} {
		sc, ok := tracing.SpanContext(s)
		if !ok || !sc.IsRemote() {
			t.Fatalf("SpanContext(%q) = %v, %v", s, sc, ok)
		}
		if got := tracing.Traceparent(sc); got != s {
			t.Errorf("Traceparent(SpanContext(%q)) = %q", s, got)
		}
	}
	for _, bad := range []string{"", "00-zz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", tp + "-x"} {
		if sc, ok := tracing.SpanContext(bad); ok || sc.IsValid() {
			t.Errorf("SpanContext(%q) = %v, %v; want nothing", bad, sc, ok)
		}
	}
	if got := tracing.Traceparent(trace.SpanContext{}); got != "" {
		t.Errorf("Traceparent of an invalid context = %q, want empty", got)
	}
	ctx := tracing.ContextWithParent(context.Background(), tp)
	if got := tracing.Traceparent(trace.SpanContextFromContext(ctx)); got != tp {
		t.Errorf("ContextWithParent: %q", got)
	}
}

// TestAnnotate: a recording span gets every §12 attribute of the row and a
// link to the row's claim; a span that does not record costs nothing.
func TestAnnotate(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp0 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	yes := true
	row := ledger.Row{
		Tenant: "acme", Key: "k1", IntentFingerprint: "fp", MetadataLocalID: "rl_1", RunID: "run", Tool: "stripe.charge",
		ToolCallID: "call_1", Vendor: "stripe", Status: ledger.StatusSucceeded, Attempt: 2, UpstreamReceiptID: "pi_1",
		IdempotentReplayed: true, VendorShouldRetry: &yes, FirstSeenAt: time.Unix(10, 0), SucceededAt: time.Unix(20, 5),
		Traceparent: tp,
	}
	_, span := tp0.Tracer("test").Start(context.Background(), "outcome")
	tracing.Annotate(span, row)
	span.End()
	tracing.Annotate(trace.SpanFromContext(context.Background()), row) // no span: nothing to do
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	got := map[string]any{}
	for _, kv := range spans[0].Attributes() {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	want := map[string]any{
		"reconciler.tenant": "acme", "reconciler.idempotency_key": "k1", "reconciler.intent_fingerprint": "fp",
		"reconciler.metadata_local_id": "rl_1", "reconciler.run_id": "run", "gen_ai.tool.name": "stripe.charge",
		"gen_ai.tool.call.id": "call_1", "reconciler.vendor": "stripe", "reconciler.status": "succeeded",
		"reconciler.attempt": int64(2), "reconciler.upstream_receipt_id": "pi_1", "reconciler.idempotent_replayed": true,
		"reconciler.vendor_should_retry": true, "reconciler.first_seen_at": "1970-01-01T00:00:10Z",
		"reconciler.succeeded_at": "1970-01-01T00:00:20.000000005Z",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	links := spans[0].Links()
	if len(links) != 1 || tracing.Traceparent(links[0].SpanContext) != tp {
		t.Fatalf("links %v, want one to %s", links, tp)
	}

	// A span never links to itself: a claim span annotated with its own row.
	_, self := tp0.Tracer("test").Start(context.Background(), "claim")
	row.Traceparent = tracing.Traceparent(self.SpanContext())
	tracing.Annotate(self, row)
	self.End()
	if l := rec.Ended()[1].Links(); len(l) != 0 {
		t.Errorf("a claim span links to itself: %v", l)
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "api")
	sc, _ := tracing.SpanContext(tp)
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "with span")
	log.InfoContext(context.Background(), "without")
	log.Info("no context")
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	if lines[0]["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || lines[0]["span_id"] != "00f067aa0ba902b7" || lines[0]["component"] != "api" {
		t.Errorf("with a span: %v", lines[0])
	}
	for _, l := range lines[1:] {
		if _, ok := l["trace_id"]; ok {
			t.Errorf("without a span: %v", l)
		}
	}
}
