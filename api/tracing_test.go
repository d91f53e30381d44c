package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/internal/tracing"
)

// agentSpan is the agent's tool span in the tests' traceparent headers.
const agentSpan = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// tracedFixture is a fixture whose API records its spans.
func tracedFixture(t *testing.T) (*fixture, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return newFixture(t, func(o *api.Options) { o.TracerProvider = tp }), rec
}

// send is fixture.do with extra headers.
func (f *fixture) send(method, target, token string, body any, header ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(method, target, bodyReader(f.t, body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rr := httptest.NewRecorder()
	f.h.ServeHTTP(rr, req)
	return rr
}

func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// TestTracedClaimAndOutcome: a claim's span is a server span, child of the
// agent's tool span named by the traceparent header, with the HTTP
// conventions and every §12 attribute; the row keeps its context; the
// outcome's span links to it.
func TestTracedClaimAndOutcome(t *testing.T) {
	f, rec := tracedFixture(t)
	rr := f.send(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1"), "traceparent", agentSpan)
	wantStatus(t, rr, http.StatusCreated)
	row := decode[claimResp](t, rr).Row

	claim := spanNamed(t, rec, "claim")
	if claim.SpanKind() != trace.SpanKindServer {
		t.Errorf("claim span kind %v", claim.SpanKind())
	}
	if got := tracing.Traceparent(claim.Parent()); got != agentSpan {
		t.Errorf("claim span's parent %q, want the agent's %q", got, agentSpan)
	}
	if got := tracing.Traceparent(claim.SpanContext()); row.Traceparent != got {
		t.Errorf("row traceparent %q, claim span %q", row.Traceparent, got)
	}
	a := attrs(claim)
	want := map[string]any{
		"reconciler.idempotency_key": row.Key, "reconciler.intent_fingerprint": row.IntentFingerprint,
		"reconciler.status": "pending", "reconciler.decision": "proceed", "reconciler.attempt": int64(1),
		"reconciler.upstream_receipt_id": "", "reconciler.idempotent_replayed": false,
		"reconciler.vendor_should_retry": false, "reconciler.first_seen_at": "2026-11-30T09:00:00Z",
		"reconciler.succeeded_at": "", "reconciler.run_id": "run_1", "reconciler.metadata_local_id": row.MetadataLocalID,
		"reconciler.tenant": "acme", "gen_ai.tool.name": "stripe.create_payment_intent", "gen_ai.tool.call.id": "call_1",
		"http.route": "/v1/claims", "http.request.method": "POST", "http.response.status_code": int64(201),
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("claim span %s = %#v, want %#v", k, a[k], v)
		}
	}

	rr = f.send(http.MethodPost, "/v1/claims/"+row.Key+"/outcome", tokenAcme, okOutcome)
	wantStatus(t, rr, http.StatusOK)
	out := spanNamed(t, rec, "outcome")
	if out.Parent().IsValid() {
		t.Errorf("the outcome came without a traceparent, yet its span has parent %v", out.Parent())
	}
	if l := out.Links(); len(l) != 1 || tracing.Traceparent(l[0].SpanContext) != row.Traceparent {
		t.Errorf("outcome links %v, want the claim %s", l, row.Traceparent)
	}
	if a := attrs(out); a["reconciler.status"] != "succeeded" || a["reconciler.upstream_receipt_id"] != "pi_123" || a["http.route"] != "/v1/claims/:key/outcome" {
		t.Errorf("outcome attributes %v", a)
	}

	// A replay of the intent is another claim span, linked to the first.
	rr = f.send(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1"))
	wantStatus(t, rr, http.StatusOK)
	var replay sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "claim" && attrs(s)["reconciler.decision"] == "replay" {
			replay = s
		}
	}
	if replay == nil || len(replay.Links()) != 1 || tracing.Traceparent(replay.Links()[0].SpanContext) != row.Traceparent {
		t.Fatalf("replay span %v, want one linked to the first claim", replay)
	}
}

// TestBadTraceparentIgnored: a malformed or oversized traceparent (or
// tracestate) is ignored — the claim proceeds as if none came, with a
// trace of its own — never a 400.
func TestBadTraceparentIgnored(t *testing.T) {
	f, rec := tracedFixture(t)
	bad := []struct{ name, header, value string }{
		{"garbage", "traceparent", "not-a-traceparent"},
		{"upper case", "traceparent", strings.ToUpper(agentSpan)},
		{"zero trace id", "traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{"oversized", "traceparent", agentSpan + strings.Repeat("-ff", 2000)},
		{"control characters", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\x01"},
		{"oversized tracestate", "tracestate", strings.Repeat("k=v,", 4000)},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			rr := f.send(http.MethodPost, "/v1/claims", tokenAcme, newClaim(fmt.Sprintf("run_bad_%d", i)), tc.header, tc.value)
			wantStatus(t, rr, http.StatusCreated)
			row := decode[claimResp](t, rr).Row
			if err := validTP(row.Traceparent); err != "" {
				t.Fatal(err)
			}
			spans := rec.Ended()
			s := spans[len(spans)-1]
			if s.Name() != "claim" || (tc.header == "traceparent" && s.Parent().IsValid()) {
				t.Errorf("case %d: span %q with parent %v, want a claim span of a new trace", i, s.Name(), s.Parent())
			}
		})
	}
}

func validTP(tp string) string {
	if _, ok := tracing.SpanContext(tp); !ok {
		return "row traceparent " + tp + " is not a span context"
	}
	return ""
}

// TestTracingRoutes: routes outside /v1 start a trace of their own (a
// sender's traceparent is only linked), probes and metrics get no span,
// and an error's code (never its message) is on the span.
func TestTracingRoutes(t *testing.T) {
	f, rec := tracedFixture(t)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		f.send(http.MethodGet, p, "", nil, "traceparent", agentSpan)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("probes made %d spans", n)
	}
	f.send(http.MethodGet, "/openapi.yaml", "", nil, "traceparent", agentSpan)
	s := spanNamed(t, rec, "GET /openapi.yaml")
	if s.Parent().IsValid() || len(s.Links()) != 1 || tracing.Traceparent(s.Links()[0].SpanContext) != agentSpan {
		t.Errorf("public route: parent %v links %v, want a new root linked to the sender's context", s.Parent(), s.Links())
	}
	rr := f.send(http.MethodPost, "/v1/claims", tokenAcme, `{"run_id": "secret-body-text"`, "traceparent", agentSpan)
	wantStatus(t, rr, http.StatusBadRequest)
	var claim sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "claim" {
			claim = s
		}
	}
	if claim == nil || attrs(claim)["reconciler.error.code"] != "bad_json" {
		t.Fatalf("bad claim span %v", claim)
	}
	for _, kv := range claim.Attributes() {
		if strings.Contains(kv.Value.String(), "secret-body-text") || strings.Contains(kv.Value.String(), tokenAcme) {
			t.Errorf("attribute %s = %q holds the body or the token", kv.Key, kv.Value.String())
		}
	}
}

// TestUntracedStoresNothing: without a TracerProvider a traceparent header
// changes nothing: the row keeps none.
func TestUntracedStoresNothing(t *testing.T) {
	f := newFixture(t)
	rr := f.send(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1"), "traceparent", agentSpan)
	wantStatus(t, rr, http.StatusCreated)
	if tp := decode[claimResp](t, rr).Row.Traceparent; tp != "" {
		t.Errorf("untraced API stored traceparent %q", tp)
	}
}
