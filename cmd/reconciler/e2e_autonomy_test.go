package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/drill"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/paging"
)

const e2eTool = `{"vendor": "stripe", "class": "write_idempotent", "side_effect": "charge",
	"key_placement": {"header": "Idempotency-Key"}, "autonomy": "autonomous",
	"checklist": {"side_effect_documented": true, "key_born_in_runtime": true, "ledger_or_unique_field": true,
		"timeout_leaves_unknown": true, "error_classes_mapped": true, "duplicate_delivery_test": true, "checked_by": "alice"}}`

// TestE2ERegistrySurvivesRestart registers a tool, restarts the program on
// the same data directory and finds the entry, and its effect on claims,
// still there.
func TestE2ERegistrySurvivesRestart(t *testing.T) {
	data := t.TempDir()
	m := startMain(t, e2eEnv, "serve", "--data", data, "--http", "127.0.0.1:0")
	code, body := call(t, m.HTTPAddr(), e2eToken, http.MethodPut, "/v1/tools/stripe.payment_intents.create", e2eTool)
	if code != http.StatusCreated {
		t.Fatalf("PUT: %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	m = startMain(t, e2eEnv, "serve", "--data", data, "--http", "127.0.0.1:0")
	code, body = call(t, m.HTTPAddr(), e2eToken, http.MethodGet, "/v1/tools/stripe.payment_intents.create", "")
	tool, _ := body["tool"].(map[string]any)
	if code != http.StatusOK || tool["version"] != float64(1) || tool["vendor"] != "stripe" {
		t.Fatalf("GET after restart: %d %v", code, body)
	}
	claim := `{"run_id": "run_1", "tool": "stripe.payment_intents.create", "vendor": "paypal", "tool_class": "write_idempotent", "intent": {"amount": 1}}`
	if code, body := call(t, m.HTTPAddr(), e2eToken, http.MethodPost, "/v1/claims", claim); code != http.StatusUnprocessableEntity {
		t.Fatalf("a mismatched claim after restart: %d %v, want 422 tool_mismatch", code, body)
	}
}

// TestE2EOutboxWorkItem drives outbox autonomy through the real program: a
// claim of an outbox tool is queued and its one work item reaches stream
// RECON_WORK on recon_work.<tenant>.<tool> with Nats-Msg-Id <tenant>:<key>,
// however often the agent retries; a worker takes it, starts the key
// (proceed, once), reports and acks, and the item is gone.
func TestE2EOutboxWorkItem(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()
	outboxTool := strings.Replace(e2eTool, `"autonomy": "autonomous"`, `"autonomy": "outbox"`, 1)
	if code, body := call(t, addr, e2eToken, http.MethodPut, "/v1/tools/stripe.payment_intents.create", outboxTool); code != http.StatusCreated {
		t.Fatalf("PUT: %d %v", code, body)
	}
	claim := `{"run_id": "run_1", "tool": "stripe.payment_intents.create", "vendor": "stripe", "tool_class": "write_idempotent",
		"intent": {"amount": 1050, "currency": "usd"},
		"request": {"method": "POST", "path": "/v1/payment_intents", "content_type": "application/x-www-form-urlencoded", "body": "amount=1050&currency=usd"}}`
	var key string
	for range 3 {
		code, body := call(t, addr, e2eToken, http.MethodPost, "/v1/claims", claim)
		if code != http.StatusAccepted || body["decision"] != "queued" {
			t.Fatalf("claim: %d %v", code, body)
		}
		key = rowField(t, body, "key")
	}

	nc, err := nats.Connect(m.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(ctx, events.DefaultWorkStream, jetstream.ConsumerConfig{
		Durable: "worker-default", FilterSubject: "recon_work.default.>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(5, jetstream.FetchMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for msg := range batch.Messages() {
		msgs = append(msgs, msg)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d work items, want exactly 1", len(msgs))
	}
	msg := msgs[0]
	if msg.Subject() != "recon_work.default.stripe.payment_intents.create" || msg.Headers().Get(jetstream.MsgIDHeader) != "default:"+key {
		t.Fatalf("work item: subject %q msg id %q", msg.Subject(), msg.Headers().Get(jetstream.MsgIDHeader))
	}
	var item ledger.Event
	if err := json.Unmarshal(msg.Data(), &item); err != nil || item.Key != key || item.Work == nil || item.Work.Request.Body != "amount=1050&currency=usd" {
		t.Fatalf("work item body: %s %v", msg.Data(), err)
	}

	code, body := call(t, addr, e2eToken, http.MethodPost, "/v1/claims/"+key+"/start", "")
	if code != http.StatusOK || body["decision"] != "proceed" {
		t.Fatalf("start: %d %v", code, body)
	}
	if code, body := call(t, addr, e2eToken, http.MethodPost, "/v1/claims/"+key+"/start", ""); code != http.StatusConflict || body["decision"] != "wait" {
		t.Fatalf("second start: %d %v", code, body)
	}
	if code, body := call(t, addr, e2eToken, http.MethodPost, "/v1/claims/"+key+"/outcome", `{"kind":"response","http_status":200,"receipt_id":"pi_w1"}`); code != http.StatusOK {
		t.Fatalf("outcome: %d %v", code, body)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, events.DefaultWorkStream)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("RECON_WORK still holds %d messages after the ack", info.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitSubjects(t, js, "recon.default.run_1.>", map[string]uint64{"recon.default.run_1.succeeded": 1})
}

// pagerHook is a generic-webhook pager: it records each event posted.
type pagerHook struct {
	mu     sync.Mutex
	events []paging.WebhookEvent
}

func (h *pagerHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev paging.WebhookEvent
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
}

func (h *pagerHook) seen(action, dedupKey string) (paging.WebhookEvent, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.events {
		if ev.EventAction == action && ev.DedupKey == dedupKey {
			return ev, true
		}
	}
	return paging.WebhookEvent{}, false
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EApprovalGate drives the approval gate through the real program
// and its config: registry.strict, a tenant's approver token, a short
// approvals.ttl, the generic webhook pager. A gated claim waits for the
// approver; the request is paged (severity info, dedup key
// recon:<tenant>:<key>:approval) and closed on the grant; the claim then
// proceeds once. A second request expires under a long-polling claim.
func TestE2EApprovalGate(t *testing.T) {
	const (
		acmeToken     = "e2e-acme-token-0123456789"
		approverToken = "e2e-acme-approver-0123456789"
	)
	hook := &pagerHook{}
	pager := httptest.NewServer(hook)
	defer pager.Close()
	cfg := configtest.WriteFile(t, "reconciler.yaml", []byte(`tenants:
  - id: acme
    tokens: ["`+acmeToken+`"]
    approver_tokens: ["`+approverToken+`"]
admin_tokens: ["`+e2eAdmin+`"]
approvals:
  ttl: 3s
registry:
  strict: true
`))
	env := map[string]string{"RECONCILER_PAGING_WEBHOOK_URL": pager.URL + "/hook"}
	m := startMain(t, env, "serve", "--config", cfg, "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	claim := func(run string) string {
		return `{"run_id": "` + run + `", "tool": "stripe.payment_intents.create", "vendor": "stripe", "tool_class": "write_idempotent", "intent": {"amount": 1050}}`
	}
	if code, body := call(t, addr, acmeToken, http.MethodPost, "/v1/claims", claim("run_1")); code != http.StatusUnprocessableEntity || body["error"].(map[string]any)["code"] != "unregistered_tool" {
		t.Fatalf("strict registry, unregistered tool: %d %v", code, body)
	}
	gated := strings.Replace(e2eTool, `"autonomy": "autonomous"`, `"autonomy": "approval"`, 1)
	if code, body := call(t, addr, acmeToken, http.MethodPut, "/v1/tools/stripe.payment_intents.create", gated); code != http.StatusCreated {
		t.Fatalf("PUT: %d %v", code, body)
	}
	code, body := call(t, addr, acmeToken, http.MethodPost, "/v1/claims", claim("run_1"))
	if code != http.StatusAccepted || body["decision"] != "await_approval" {
		t.Fatalf("gated claim: %d %v", code, body)
	}
	key := rowField(t, body, "key")
	approval := body["row"].(map[string]any)["approval"].(map[string]any)
	id := approval["id"].(string)
	dk := paging.ApprovalDedupKey("acme", key)
	waitUntil(t, "the approval page", func() bool { _, ok := hook.seen("trigger", dk); return ok })
	if ev, _ := hook.seen("trigger", dk); ev.Severity != paging.SeverityInfo || !strings.Contains(ev.Summary, id) {
		t.Fatalf("page: %+v", ev)
	}

	if code, body := call(t, addr, acmeToken, http.MethodPost, "/v1/approvals/"+id+"/approve", `{"actor": "self"}`); code != http.StatusForbidden {
		t.Fatalf("the claimant's token approving: %d %v", code, body)
	}
	if code, body := call(t, addr, approverToken, http.MethodPost, "/v1/approvals/"+id+"/approve", `{"actor": "alice", "note": "ok"}`); code != http.StatusOK {
		t.Fatalf("approve: %d %v", code, body)
	}
	code, body = call(t, addr, acmeToken, http.MethodPost, "/v1/claims", claim("run_1"))
	if code != http.StatusOK || body["decision"] != "proceed" {
		t.Fatalf("claim after the grant: %d %v", code, body)
	}
	if code, body := call(t, addr, acmeToken, http.MethodPost, "/v1/claims", claim("run_1")); code != http.StatusConflict {
		t.Fatalf("second claim after the grant: %d %v", code, body)
	}
	waitUntil(t, "the page's resolve", func() bool { _, ok := hook.seen("resolve", dk); return ok })

	// A second request expires while a claim long-polls it.
	code, body = call(t, addr, acmeToken, http.MethodPost, "/v1/claims", claim("run_2"))
	if code != http.StatusAccepted {
		t.Fatalf("second gated claim: %d %v", code, body)
	}
	key2 := rowField(t, body, "key")
	code, body = call(t, addr, acmeToken, http.MethodPost, "/v1/claims?wait=20s", claim("run_2"))
	if code != http.StatusOK || body["decision"] != "stop" || body["code"] != "approval_expired" {
		t.Fatalf("long poll across the expiry: %d %v", code, body)
	}

	nc, err := nats.Connect(m.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitSubjects(t, js, "recon.acme.>", map[string]uint64{
		"recon.acme.run_1.approval_requested": 1, "recon.acme.run_1.approved": 1,
		"recon.acme.run_2.approval_requested": 1, "recon.acme.run_2.approval_expired": 1,
	})
	checkMsgID(t, js, "recon.acme.run_1.approved", "acme:"+key+":approved")
	checkMsgID(t, js, "recon.acme.run_2.approval_expired", "acme:"+key2+":approval_expired")
	waitUntil(t, "the expired request's resolve", func() bool { _, ok := hook.seen("resolve", paging.ApprovalDedupKey("acme", key2)); return ok })
}

// TestE2EDrillTool: `reconciler drill --tool` against the real program
// drills an outbox tool as registered, then checks its
// duplicate_delivery_test box (checked_by reconciler drill) with a PUT;
// a failing drill leaves the box open and exits 1.
func TestE2EDrillTool(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()
	const name = "stripe.payment_intents.later"
	unchecked := strings.NewReplacer(`"autonomy": "autonomous"`, `"autonomy": "outbox"`,
		`"duplicate_delivery_test": true`, `"duplicate_delivery_test": false`).Replace(e2eTool)
	if code, body := call(t, addr, e2eToken, http.MethodPut, "/v1/tools/"+name, unchecked); code != http.StatusCreated {
		t.Fatalf("PUT: %d %v", code, body)
	}
	box := func() (bool, string) {
		t.Helper()
		code, body := call(t, addr, e2eToken, http.MethodGet, "/v1/tools/"+name, "")
		tool, _ := body["tool"].(map[string]any)
		cl, _ := tool["checklist"].(map[string]any)
		if code != http.StatusOK || cl == nil {
			t.Fatalf("GET: %d %v", code, body)
		}
		by, _ := cl["checked_by"].(string)
		return cl["duplicate_delivery_test"] == true, by
	}
	args := []string{"--tool", name, "--url", "http://" + addr, "--token", e2eToken}

	var stdout, stderr bytes.Buffer
	code := runDrillWith(context.Background(), args, &stdout, &stderr,
		drill.Options{TempDir: t.TempDir(), Sabotage: drill.SabotageQueuedAsFailure})
	if checked, _ := box(); code != 1 || checked {
		t.Fatalf("a failing drill: exit %d, box %v\nstdout:\n%s\nstderr:\n%s", code, checked, stdout.String(), stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	code = runDrillWith(context.Background(), args, &stdout, &stderr, drill.Options{TempDir: t.TempDir()})
	out := stdout.String()
	if code != 0 || !strings.Contains(out, "outbox-three-retries-execute-once") || !strings.Contains(out, "SKIP") ||
		!strings.Contains(out, name+": duplicate_delivery_test checked") {
		t.Fatalf("drill --tool: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr.String())
	}
	if checked, by := box(); !checked || by != "reconciler drill" {
		t.Fatalf("after the drills: box %v checked_by %q", checked, by)
	}
	version := func(tool string) float64 {
		t.Helper()
		_, body := call(t, addr, e2eToken, http.MethodGet, "/v1/tools/"+tool, "")
		v, _ := body["tool"].(map[string]any)["version"].(float64)
		return v
	}

	// Drilled again: the box is checked already, and nothing is written.
	before := version(name)
	stdout.Reset()
	stderr.Reset()
	if code := runDrillWith(context.Background(), args, &stdout, &stderr, drill.Options{TempDir: t.TempDir()}); code != 0 || version(name) != before {
		t.Fatalf("drilled again: exit %d, version %v -> %v\nstderr:\n%s", code, before, version(name), stderr.String())
	}

	// Another box open: the entry is gated, so only the gate's drills
	// apply; they pass, but they test no duplicate delivery, and the box
	// stays open.
	const gated = "stripe.payment_intents.gated"
	open := strings.NewReplacer(`"duplicate_delivery_test": true`, `"duplicate_delivery_test": false`,
		`"error_classes_mapped": true`, `"error_classes_mapped": false`).Replace(e2eTool)
	if code, body := call(t, addr, e2eToken, http.MethodPut, "/v1/tools/"+gated, open); code != http.StatusCreated {
		t.Fatalf("PUT: %d %v", code, body)
	}
	stdout.Reset()
	stderr.Reset()
	code = runDrillWith(context.Background(), []string{"--tool", gated, "--url", "http://" + addr, "--token", e2eToken}, &stdout, &stderr, drill.Options{TempDir: t.TempDir()})
	_, body := call(t, addr, e2eToken, http.MethodGet, "/v1/tools/"+gated, "")
	cl, _ := body["tool"].(map[string]any)["checklist"].(map[string]any)
	if code != 1 || cl["duplicate_delivery_test"] == true || !strings.Contains(stderr.String(), "no duplicate-delivery drill applies") {
		t.Fatalf("only the gate's drills: exit %d, box %v\nstdout:\n%s\nstderr:\n%s", code, cl["duplicate_delivery_test"], stdout.String(), stderr.String())
	}
}
