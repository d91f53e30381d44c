package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes every export
// request (protobuf, gzip or not) and keeps the spans with their
// resource's attributes.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	resource []*commonpb.KeyValue
	span     *tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP request %s %s (%s)", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
			http.Error(w, "want protobuf on /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &export); err != nil {
			t.Errorf("OTLP body: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, receivedSpan{resource: rs.GetResource().GetAttributes(), span: s})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) all() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// find returns the received spans for which match is true.
func (r *otlpReceiver) find(match func(*tracepb.Span) bool) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range r.all() {
		if match(s.span) {
			out = append(out, s.span)
		}
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	v := attrMap(kvs)[key]
	if v == nil {
		return ""
	}
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return v.String()
}

// freeAddr is a loopback address nobody listens on right now (the child
// needs known ports; another process taking one meanwhile is accepted).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// buildReconciler builds the real binary into dir.
func buildReconciler(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(dir, "reconciler")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/agentledger/reconciler/cmd/reconciler").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/reconciler: %v\n%s", err, out)
	}
	return bin
}

// startTracedBinary runs `reconciler serve` exporting OTLP/HTTP to
// endpoint, and stops it with SIGTERM (which flushes its spans) when the
// test ends.
func startTracedBinary(t *testing.T, endpoint string) (httpAddr, natsURL string) {
	t.Helper()
	dir := t.TempDir()
	bin := buildReconciler(t, dir)
	cfg := writeStripeConfig(t, dir)
	httpAddr, natsAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--http", httpAddr, "--nats-listen", natsAddr)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "RECONCILER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2E_TOKEN="+e2eToken, "E2E_ADMIN="+e2eAdmin, "E2E_STRIPE_SECRET="+e2eStripeSecret,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")
	logs := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("reconciler exit: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("reconciler did not stop\n%s", logs.String())
		}
	})
	testkit.EventuallyWithin(t, 60*time.Second, "reconciler serving", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("reconciler exited: %v\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(logs.String(), `"msg":"tracing on"`) {
		t.Fatalf("the binary did not turn tracing on:\n%s", logs.String())
	}
	return httpAddr, "nats://" + natsAddr
}

// bodyMarker is in the claim's request envelope: no span may carry it.
const bodyMarker = "BODY-SECRET-MARKER-7f3a"

// TestE2ETraces runs the real binary exporting OTLP/HTTP to a receiver
// here and drives claim → timeout → signed webhook → NATS event → Await
// from a tool span of the test's own: one trace rooted at that span holds
// the claim (with every §12 attribute), the outcome and the publish of
// the resolution; the webhook's span is a trace of its own linked to the
// claim; the event's traceparent names the tool span's trace, and the
// resumed run continues it. Bad or oversized traceparent headers are
// ignored; no span carries a token, a secret or a body.
func TestE2ETraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	recv := newOTLPReceiver(t)
	addr, natsURL := startTracedBinary(t, recv.srv.URL)

	// The agent runtime: its own SDK, its tool span the root of the trace.
	agent := tracetest.NewSpanRecorder()
	atp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(agent))
	ctx, tool := atp.Tracer("agent").Start(context.Background(), "execute_tool stripe.payment_intents.create")
	toolTrace := tool.SpanContext().TraceID()

	c, err := client.New("http://"+addr, e2eToken, client.WithCallTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	claim := client.ClaimRequest{
		RunID: "run_trace", Tool: "stripe.payment_intents.create", ToolCallID: "call_7", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Intent: map[string]any{"amount": 1050, "currency": "usd"},
		Request: &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded",
			Body: "amount=1050&currency=usd&description=" + bodyMarker},
	}
	// The vendor commits, then the answer never comes: a timeout.
	out, err := c.Do(ctx, claim, func(ctx context.Context, _, _ string) (client.Result, error) {
		<-ctx.Done()
		return client.Result{}, ctx.Err()
	})
	if !errors.Is(err, client.ErrUnsettled) || out.Row.Status != ledger.StatusUnknown {
		t.Fatalf("Do = %v, row %s; want unsettled, unknown", err, out.Row.Status)
	}

	// Bad and oversized traceparent headers: ignored, never a 400.
	for i, tp := range []string{"garbage", strings.ToUpper(tool.SpanContext().TraceID().String()), "00-" + toolTrace.String() + "-" + strings.Repeat("f", 4000) + "-01"} {
		body := fmt.Sprintf(`{"run_id":"run_bad_%d","tool":"stripe.payment_intents.create","vendor":"stripe","tool_class":"write_idempotent","intent":{"n":%d}}`, i, i)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/claims", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("claim with traceparent %.40q… = %d, want 201", tp, resp.StatusCode)
		}
	}

	// Stripe's signed webhook, with a traceparent a sender made up: the
	// webhook starts a trace of its own.
	payload, err := fixtures.Set(fixtures.Load("stripe/2024-06-20/payment_intent.succeeded"), "metadata_local_id", out.LocalID)
	if err != nil {
		t.Fatal(err)
	}
	const senderTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sig := fixtures.SignStripe(payload, time.Now(), e2eStripeSecret)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(payload))
	req.Header.Set("Stripe-Signature", sig)
	req.Header.Set("traceparent", senderTP)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook = %d", resp.StatusCode)
	}

	// The paused run waits on NATS and resumes in the same trace.
	nc, js, err := events.Connect(natsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ev, err := events.Await(actx, js, "default", "run_trace", out.Key)
	if err != nil || ev.Status != string(ledger.StatusSucceeded) {
		t.Fatalf("Await = %v %v", ev.Status, err)
	}
	evSC, ok := tracing.SpanContext(ev.Traceparent)
	if !ok || evSC.TraceID() != toolTrace {
		t.Fatalf("event traceparent %q: want the tool span's trace %s", ev.Traceparent, toolTrace)
	}
	_, resumed := atp.Tracer("agent").Start(events.ResumeContext(context.Background(), ev), "resumed run")
	resumed.End()
	tool.End()
	if got := resumed.SpanContext().TraceID(); got != toolTrace {
		t.Errorf("resumed run's trace %s, want %s", got, toolTrace)
	}

	// The service's spans reach the receiver.
	traceID := func(s *tracepb.Span) trace.TraceID { return trace.TraceID(s.GetTraceId()) }
	spanID := func(b []byte) trace.SpanID { return trace.SpanID(b) }
	inTrace := func(name string) func(*tracepb.Span) bool {
		return func(s *tracepb.Span) bool { return s.GetName() == name && traceID(s) == toolTrace }
	}
	var claims, publishes, webhooksSpans []*tracepb.Span
	testkit.EventuallyWithin(t, 20*time.Second, "the claim, outcome, webhook and publish spans", func() bool {
		claims, publishes = recv.find(inTrace("claim")), recv.find(inTrace("publish"))
		webhooksSpans = recv.find(func(s *tracepb.Span) bool { return s.GetName() == "webhook" })
		return len(claims) == 1 && len(recv.find(inTrace("outcome"))) == 1 && len(webhooksSpans) == 1 && len(publishes) == 2
	})
	claimSpan := claims[0]
	if spanID(claimSpan.GetParentSpanId()) != tool.SpanContext().SpanID() || claimSpan.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("claim span: parent %x kind %v, want the tool span %s, server", claimSpan.GetParentSpanId(), claimSpan.GetKind(), tool.SpanContext().SpanID())
	}
	claimTP := tracing.Traceparent(trace.NewSpanContext(trace.SpanContextConfig{TraceID: toolTrace, SpanID: spanID(claimSpan.GetSpanId()), TraceFlags: trace.FlagsSampled}))
	if got := rowTraceparent(t, addr, out.Key); got != claimTP {
		t.Errorf("row traceparent %q, want the claim span's %q", got, claimTP)
	}
	ca := attrMap(claimSpan.GetAttributes())
	for _, k := range []string{
		"reconciler.idempotency_key", "reconciler.intent_fingerprint", "reconciler.status", "reconciler.decision",
		"reconciler.attempt", "reconciler.upstream_receipt_id", "reconciler.idempotent_replayed", "reconciler.vendor_should_retry",
		"reconciler.first_seen_at", "reconciler.succeeded_at", "reconciler.run_id", "reconciler.metadata_local_id",
		"reconciler.tenant", "gen_ai.tool.name", "gen_ai.tool.call.id",
		"http.request.method", "http.route", "http.response.status_code", "url.path",
	} {
		if ca[k] == nil {
			t.Errorf("claim span lacks %s", k)
		}
	}
	for k, want := range map[string]string{
		"reconciler.idempotency_key": out.Key, "reconciler.metadata_local_id": out.LocalID, "reconciler.decision": "proceed",
		"reconciler.status": "pending", "reconciler.attempt": "1", "reconciler.run_id": "run_trace", "reconciler.tenant": "default",
		"gen_ai.tool.name": "stripe.payment_intents.create", "gen_ai.tool.call.id": "call_7", "http.route": "/v1/claims",
	} {
		if got := attrString(claimSpan.GetAttributes(), k); got != want {
			t.Errorf("claim span %s = %q, want %q", k, got, want)
		}
	}

	// Every span of the tool's trace descends from the tool span.
	ids := map[trace.SpanID]bool{tool.SpanContext().SpanID(): true}
	for _, s := range recv.find(func(s *tracepb.Span) bool { return traceID(s) == toolTrace }) {
		ids[spanID(s.GetSpanId())] = true
	}
	for _, s := range recv.find(func(s *tracepb.Span) bool { return traceID(s) == toolTrace }) {
		if !ids[spanID(s.GetParentSpanId())] {
			t.Errorf("span %s of the tool's trace has a parent %x outside it", s.GetName(), s.GetParentSpanId())
		}
	}

	wh := webhooksSpans[0]
	if traceID(wh) == toolTrace || hex.EncodeToString(wh.GetTraceId()) == senderTP[3:35] || len(wh.GetParentSpanId()) != 0 {
		t.Errorf("webhook span: trace %x parent %x, want a root of a new trace", wh.GetTraceId(), wh.GetParentSpanId())
	}
	linked := map[string]bool{}
	for _, l := range wh.GetLinks() {
		linked[hex.EncodeToString(l.GetTraceId())+"-"+hex.EncodeToString(l.GetSpanId())] = true
	}
	if !linked[toolTrace.String()+"-"+hex.EncodeToString(claimSpan.GetSpanId())] || !linked[senderTP[3:35]+"-"+senderTP[36:52]] {
		t.Errorf("webhook span links %v, want the claim and the sender's context", linked)
	}
	if got := attrString(wh.GetAttributes(), "reconciler.status"); got != "succeeded" {
		t.Errorf("webhook span status attribute %q", got)
	}

	var succeeded *tracepb.Span
	for _, p := range publishes {
		if attrString(p.GetAttributes(), "reconciler.event") == "succeeded" {
			succeeded = p
		}
	}
	if succeeded == nil {
		t.Fatal("no publish span of the succeeded event")
	}
	if spanID(succeeded.GetParentSpanId()) != spanID(claimSpan.GetSpanId()) || succeeded.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER ||
		attrString(succeeded.GetAttributes(), "messaging.system") != "nats" ||
		attrString(succeeded.GetAttributes(), "messaging.destination.name") != "recon.default.run_trace.succeeded" {
		t.Errorf("publish span: parent %x kind %v attributes %v", succeeded.GetParentSpanId(), succeeded.GetKind(), attrMap(succeeded.GetAttributes()))
	}
	if evSC.SpanID() != spanID(succeeded.GetSpanId()) {
		t.Errorf("event traceparent names span %s, want the publish span %x", evSC.SpanID(), succeeded.GetSpanId())
	}

	// The bad headers' claims are traces of their own.
	for _, s := range recv.find(func(s *tracepb.Span) bool {
		return s.GetName() == "claim" && strings.HasPrefix(attrString(s.GetAttributes(), "reconciler.run_id"), "run_bad_")
	}) {
		if traceID(s) == toolTrace || len(s.GetParentSpanId()) != 0 {
			t.Errorf("a claim with a bad traceparent joined trace %x", s.GetTraceId())
		}
	}

	// Nothing secret on any span: tokens, the webhook secret and its
	// signature, the request envelope's body, the webhook's body.
	all := recv.all()
	if len(all) == 0 || attrString(all[0].resource, "service.name") != "reconciler" {
		t.Fatalf("resource of the spans: %v", all)
	}
	secrets := []string{e2eToken, e2eAdmin, e2eStripeSecret, sig, bodyMarker, `"livemode"`, "Bearer"}
	for _, rs := range all {
		text := rs.span.String()
		for _, kv := range rs.resource {
			text += kv.String()
		}
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("span %s carries %q", rs.span.GetName(), s)
			}
		}
	}
}

// rowTraceparent reads a row's traceparent through the API.
func rowTraceparent(t *testing.T, addr, key string) string {
	t.Helper()
	_, body := call(t, addr, e2eToken, "GET", "/v1/claims/"+key, "")
	return rowField(t, body, "traceparent")
}
