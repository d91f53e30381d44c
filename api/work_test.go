package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// outboxTool is newClaim's tool, registered with outbox autonomy.
func outboxTool() map[string]any { return toolWith("autonomy", "outbox") }

// withRequest is newClaim with the request envelope the worker sends.
func withRequest(c claimReq) claimReq {
	return c.with("request", map[string]any{"method": "POST", "path": "/v1/payment_intents", "content_type": "application/x-www-form-urlencoded", "body": "amount=1050&currency=usd"})
}

func startPath(key string) string { return "/v1/claims/" + escape(key) + "/start" }

// workItems are the work items in the fixture store's outbox.
func (f *fixture) workItems() []ledger.Event {
	f.t.Helper()
	recs, err := f.store.PendingEvents(f.t.Context(), 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []ledger.Event
	for _, r := range recs {
		if r.Event.Status == ledger.EventQueued {
			out = append(out, r.Event)
		}
	}
	return out
}

func TestOutboxFlow(t *testing.T) {
	f := newGateFixture(t, outboxTool())
	got := f.mustClaim(tokenAcme, withRequest(newClaim("run_1")), http.StatusAccepted)
	if got.Decision != ledger.DecisionQueued || got.Row.Attempt != 0 || got.Row.Autonomy != ledger.AutonomyOutbox || got.Row.Approval != nil {
		t.Fatalf("outbox claim: %s attempt %d autonomy %q", got.Decision, got.Row.Attempt, got.Row.Autonomy)
	}
	key := got.Row.Key
	// However often the agent retries: queued, and one work item.
	for range 3 {
		f.clock.Advance(time.Minute)
		if r := f.mustClaim(tokenAcme, withRequest(newClaim("run_1")), http.StatusAccepted); r.Decision != ledger.DecisionQueued {
			t.Fatalf("retry: %s", r.Decision)
		}
	}
	items := f.workItems()
	if len(items) != 1 || items[0].Key != key || items[0].MsgID() != "acme:"+key || items[0].Work.Request.Path != "/v1/payment_intents" {
		t.Fatalf("work items: %+v", items)
	}

	// The worker starts the call: proceed once, then wait.
	rec := f.do(http.MethodPost, startPath(key), tokenAcme, nil)
	wantStatus(t, rec, http.StatusOK)
	if s := decode[claimResp](t, rec); s.Decision != ledger.DecisionProceed || s.Row.Attempt != 1 || s.Row.Key != key {
		t.Fatalf("start: %s attempt %d", s.Decision, s.Row.Attempt)
	}
	rec = f.do(http.MethodPost, startPath(key), tokenAcme, "{}")
	wantStatus(t, rec, http.StatusConflict)
	if s := decode[claimResp](t, rec); s.Decision != ledger.DecisionWait {
		t.Fatalf("second start: %s", s.Decision)
	}
	// The agent never gets the call.
	if r := f.mustClaim(tokenAcme, withRequest(newClaim("run_1")), http.StatusAccepted); r.Decision != ledger.DecisionQueued || r.Row.Attempt != 1 {
		t.Fatalf("agent while the worker calls: %s", r.Decision)
	}

	// A second worker long-polls; the first reports; the poll answers replay.
	done := make(chan claimResp, 1)
	go func() {
		rec := f.do(http.MethodPost, startPath(key)+"?wait=20s", tokenAcme, nil)
		done <- decode[claimResp](t, rec)
	}()
	testkit.Eventually(t, "the long poll", func() bool { return f.metricValue("reconciler_claim_waiters", nil) == 1 })
	f.report(tokenAcme, key, okOutcome)
	select {
	case s := <-done:
		if s.Decision != ledger.DecisionReplay || s.Row.UpstreamReceiptID != "pi_123" {
			t.Fatalf("long-polling start: %s", s.Decision)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the report did not wake the long-polling start")
	}
	if r := f.mustClaim(tokenAcme, withRequest(newClaim("run_1")), http.StatusOK); r.Decision != ledger.DecisionReplay {
		t.Fatalf("agent after success: %s", r.Decision)
	}
	if v := f.metricValue("reconciler_claims_total", map[string]string{"decision": "queued"}); v != 5 {
		t.Fatalf("reconciler_claims_total{decision=queued}: %v, want 5", v)
	}
	if len(f.workItems()) != 1 {
		t.Fatal("the worker's starts wrote work items")
	}
}

func TestOutboxErrors(t *testing.T) {
	t.Run("an outbox claim without its request is 422 request_required", func(t *testing.T) {
		f := newGateFixture(t, outboxTool())
		e := wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1")), http.StatusUnprocessableEntity, "request_required")
		if !strings.Contains(e.Error.Message, "request envelope") {
			t.Fatalf("message: %q", e.Error.Message)
		}
		if rows := f.rowsOf(tokenAcme); len(rows) != 0 || len(f.workItems()) != 0 {
			t.Fatal("a refused outbox claim left a row or a work item")
		}
	})
	t.Run("a frozen outbox tool: 423 with no row, and a frozen start waits", func(t *testing.T) {
		f := newGateFixture(t, outboxTool())
		key := f.mustClaim(tokenAcme, withRequest(newClaim("run_1")), http.StatusAccepted).Row.Key
		f.freeze("acme", "stripe.create_payment_intent")
		f.mustClaim(tokenAcme, withRequest(newClaim("run_2")), http.StatusLocked)
		rec := f.do(http.MethodPost, startPath(key), tokenAcme, nil)
		wantStatus(t, rec, http.StatusConflict)
		if s := decode[claimResp](t, rec); s.Decision != ledger.DecisionWait || s.Row.Attempt != 0 {
			t.Fatalf("frozen start: %s attempt %d", s.Decision, s.Row.Attempt)
		}
	})
	t.Run("start refusals", func(t *testing.T) {
		f := newGateFixture(t, nil)
		plain := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
		for _, tc := range []struct {
			name   string
			target string
			token  string
			body   any
			status int
			code   string
		}{
			{"no token", startPath(plain), "", nil, 401, "unauthorized"},
			{"an admin token", startPath(plain), tokenAdmin, nil, 403, "forbidden"},
			{"an approver token", startPath(plain), tokenAcmeApprover, nil, 403, "forbidden"},
			{"no such row", startPath("no-such-key"), tokenAcme, nil, 404, "not_found"},
			{"another tenant's row", startPath(plain), tokenGlobex, nil, 404, "not_found"},
			{"a row that was not queued", startPath(plain), tokenAcme, nil, 409, "not_queued"},
			{"a body with fields", startPath(plain), tokenAcme, map[string]any{"intent": map[string]any{}}, 400, "bad_json"},
			{"a bad wait", startPath(plain) + "?wait=forever", tokenAcme, nil, 400, "invalid_input"},
			{"a bad key", "/v1/claims/a%20b/start", tokenAcme, nil, 400, "invalid_input"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantError(t, f.do(http.MethodPost, tc.target, tc.token, tc.body), tc.status, tc.code)
			})
		}
		if got := f.rowsOf(tokenAcme); len(got) != 1 || got[0].Attempt != 1 {
			t.Fatalf("refused starts changed the rows: %+v", got)
		}
	})
}
