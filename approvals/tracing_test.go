package approvals_test

import (
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/approvals"
	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

const claimTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestApprovalSpans: an expiry is an approval span, and each pager the
// notifier asks a page span, both new traces linked to the row's claim; a
// failed page is an error without the pager's text.
func TestApprovalSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run_1", Tool: "email.send", Vendor: "resend", ToolClass: ledger.ClassWriteIrreversible,
		Intent: json.RawMessage(`{"to":"a@example.com"}`), Traceparent: claimTP,
		Gate: ledger.Gate{Autonomy: ledger.AutonomyApproval, Reason: "irreversible", ApprovalTTL: time.Minute},
	}, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	x := approvals.NewExpirer(st, approvals.ExpirerOptions{Now: func() time.Time { return t0.Add(time.Hour) }, TracerProvider: tp})
	if n, err := x.Pass(t.Context()); n != 1 || err != nil {
		t.Fatalf("pass: %d %v", n, err)
	}
	n := approvals.NewNotifier(approvals.NotifierOptions{Pagers: []approvals.Pager{&fakePager{}, &fakePager{fail: true}}, TracerProvider: tp})
	ev := requested()
	ev.Traceparent = claimTP
	if err := n.HandleEvent(t.Context(), ev); err == nil {
		t.Fatal("a failing pager: no error")
	}

	spans := rec.Ended()
	if len(spans) != 3 || spans[0].Name() != "approval" || spans[1].Name() != "page" || spans[2].Name() != "page" {
		t.Fatalf("spans %v", spans)
	}
	for _, s := range spans {
		if s.Parent().IsValid() || len(s.Links()) != 1 || tracing.Traceparent(s.Links()[0].SpanContext) != claimTP {
			t.Errorf("%s: parent %v links %v, want a root linked to the claim", s.Name(), s.Parent(), s.Links())
		}
	}
	a := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		a[string(kv.Key)] = kv.Value.String()
	}
	if a["reconciler.approval.state"] != "expired" || a["reconciler.status"] != "failed_poison" || a["reconciler.approval.id"] == "" {
		t.Errorf("approval span %v", a)
	}
	if spans[1].Status().Code != 0 || spans[2].Status().Description != "page not delivered" || spans[2].SpanKind() != trace.SpanKindClient {
		t.Errorf("page spans' status %v %v", spans[1].Status(), spans[2].Status())
	}
}
