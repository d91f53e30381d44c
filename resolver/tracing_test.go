package resolver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/resolver"
)

// TestResolveAndPageSpans: a pass makes one resolve span per row — a new
// trace linked to the row's claim, with the row and what was done — and
// a page span under it; the page resolver's resolve is a page span linked
// to the claim too.
func TestResolveAndPageSpans(t *testing.T) {
	const claimTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := newEnv(t, false, func(o *resolver.Options, _ *env) { o.TracerProvider = tp })
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "run1", Tool: "stripe.payment_intents", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(`{"n":1}`), ReplayWindow: 30 * time.Minute, Traceparent: claimTP,
	}, policy, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.store.Claim(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	row := e.report(res.Row, ledger.Outcome{Kind: ledger.OutcomeTimeout})
	e.clock.Advance(time.Hour)
	e.pass()

	var resolve, page sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "resolve":
			resolve = s
		case "page":
			page = s
		}
	}
	if resolve == nil || page == nil {
		t.Fatalf("spans %v, want a resolve and a page span", rec.Ended())
	}
	linked := func(s sdktrace.ReadOnlySpan) bool {
		l := s.Links()
		return len(l) == 1 && tracing.Traceparent(l[0].SpanContext) == claimTP
	}
	if resolve.Parent().IsValid() || !linked(resolve) {
		t.Errorf("resolve span: parent %v links %v, want a root linked to the claim", resolve.Parent(), resolve.Links())
	}
	if page.Parent().SpanID() != resolve.SpanContext().SpanID() || !linked(page) || page.SpanKind() != trace.SpanKindClient {
		t.Errorf("page span: parent %v links %v kind %v", page.Parent(), page.Links(), page.SpanKind())
	}
	a := map[string]string{}
	for _, kv := range resolve.Attributes() {
		a[string(kv.Key)] = kv.Value.String()
	}
	if a["reconciler.idempotency_key"] != row.Key || a["reconciler.resolver.actions"] != `["absent","paged"]` {
		t.Errorf("resolve attributes %v", a)
	}
	for _, kv := range page.Attributes() {
		a[string(kv.Key)] = kv.Value.String()
	}
	if a["reconciler.page.action"] != "trigger" || a["reconciler.page.dedup_key"] != "recon:"+tenant+":"+row.Key {
		t.Errorf("page attributes %v", a)
	}

	rec2 := tracetest.NewSpanRecorder()
	pr := resolver.NewPageResolver(e.pager, nil, resolver.TracePages(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2))))
	ev := ledger.Event{Key: row.Key, Tenant: tenant, RunID: "run1", Status: string(ledger.StatusSucceeded), PagedAt: e.clock.Now(), Traceparent: claimTP}
	if err := pr.HandleEvent(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if s := rec2.Ended(); len(s) != 1 || s[0].Name() != "page" || !linked(s[0]) {
		t.Fatalf("page resolver spans %v", s)
	}
}
