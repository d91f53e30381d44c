package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

const (
	tokenAcmeApprover   = "tok_acme_approver_5b4c3d2e1f"
	tokenGlobexApprover = "tok_globex_approver_9a8b7c6d"
	fixtureTTL          = time.Hour
)

type approvalResp struct {
	Approval ledger.Approval `json:"approval"`
	Row      ledger.Row      `json:"row"`
}

type approvalsResp struct {
	Approvals  []approvalResp `json:"approvals"`
	NextCursor string         `json:"next_cursor"`
}

// newGateFixture serves a registry, approver tokens for both tenants and a
// one-hour approval TTL, with newClaim's tool registered as tool says.
func newGateFixture(t *testing.T, tool map[string]any) *fixture {
	t.Helper()
	f, _ := newRegistryFixture(t, func(o *api.Options) {
		o.ApproverTokens = map[string]string{tokenAcmeApprover: "acme", tokenGlobexApprover: "globex"}
		o.ApprovalTTL = fixtureTTL
	})
	if tool != nil {
		f.putTool(tokenAcme, "stripe.create_payment_intent", tool, http.StatusCreated)
	}
	return f
}

// approvalTool is newClaim's tool, registered to ask for approval.
func approvalTool() map[string]any { return toolWith("autonomy", "approval") }

func approvalPath(id, action string) string {
	if action == "" {
		return "/v1/approvals/" + id
	}
	return "/v1/approvals/" + id + "/" + action
}

var approve = map[string]any{"actor": "alice@example.com", "note": "checked the customer"}

func (f *fixture) decideApproval(token, id, action string, body any, status int) approvalResp {
	f.t.Helper()
	rec := f.do(http.MethodPost, approvalPath(id, action), token, body)
	wantStatus(f.t, rec, status)
	return decode[approvalResp](f.t, rec)
}

func TestApprovalFlow(t *testing.T) {
	f := newGateFixture(t, approvalTool())
	got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusAccepted)
	a := got.Row.Approval
	if got.Decision != ledger.DecisionAwaitApproval || got.Row.Attempt != 0 || got.Row.Status != ledger.StatusPending || got.Row.Autonomy != ledger.AutonomyApproval {
		t.Fatalf("gated claim: %s attempt %d %s", got.Decision, got.Row.Attempt, got.Row.Status)
	}
	if a == nil || a.State != ledger.ApprovalRequested || a.Reason != "the tool is registered with autonomy approval" ||
		!a.ExpiresAt.Equal(t0.Add(fixtureTTL)) || !strings.HasPrefix(a.RequestedBy, "tok_") || a.RequestedBy == tokenAcme {
		t.Fatalf("approval: %+v", a)
	}
	key := got.Row.Key

	// Retries wait while the request is open.
	if r := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusConflict); r.Decision != ledger.DecisionWait || r.Row.Attempt != 0 {
		t.Fatalf("retry while requested: %s", r.Decision)
	}

	// The request is listed for the tenant, its approvers and the admin.
	for _, tok := range []string{tokenAcme, tokenAcmeApprover, tokenAdmin} {
		l := decode[approvalsResp](t, f.do(http.MethodGet, "/v1/approvals?state=requested", tok, nil))
		if len(l.Approvals) != 1 || l.Approvals[0].Approval.ID != a.ID || l.Approvals[0].Row.Key != key {
			t.Fatalf("list with %s: %+v", tok[:8], l)
		}
	}
	for _, tok := range []string{tokenGlobex, tokenGlobexApprover} {
		rec := f.do(http.MethodGet, "/v1/approvals", tok, nil)
		wantStatus(t, rec, http.StatusOK)
		if !strings.Contains(rec.Body.String(), `"approvals":[]`) {
			t.Fatalf("another tenant's list: %s", rec.Body.String())
		}
	}
	if l := decode[approvalsResp](t, f.do(http.MethodGet, "/v1/approvals?tenant=globex", tokenAdmin, nil)); len(l.Approvals) != 0 {
		t.Fatalf("admin ?tenant=globex: %+v", l)
	}
	one := decode[approvalResp](t, f.do(http.MethodGet, approvalPath(a.ID, ""), tokenAcmeApprover, nil))
	if one.Approval.ID != a.ID || one.Row.Key != key {
		t.Fatalf("GET one: %+v", one)
	}
	wantError(t, f.do(http.MethodGet, approvalPath(a.ID, ""), tokenGlobex, nil), http.StatusNotFound, "not_found")

	// Only an approver of the tenant (or an admin) decides.
	wantError(t, f.do(http.MethodPost, approvalPath(a.ID, "approve"), tokenAcme, approve), http.StatusForbidden, "forbidden")
	wantError(t, f.do(http.MethodPost, approvalPath(a.ID, "approve"), tokenGlobexApprover, approve), http.StatusNotFound, "not_found")
	// An approver token makes no claims.
	wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcmeApprover, newClaim("run_1")), http.StatusForbidden, "forbidden")

	f.clock.Advance(time.Minute)
	granted := f.decideApproval(tokenAcmeApprover, a.ID, "approve", approve, http.StatusOK)
	ga := granted.Approval
	if ga.State != ledger.ApprovalGranted || ga.Actor != "alice@example.com" || ga.Note != "checked the customer" ||
		!ga.DecidedAt.Equal(t0.Add(time.Minute)) || !strings.HasPrefix(ga.DecidedBy, "tok_") || ga.DecidedBy == ga.RequestedBy {
		t.Fatalf("granted: %+v", ga)
	}
	e := wantError(t, f.do(http.MethodPost, approvalPath(a.ID, "deny"), tokenAdmin, map[string]any{"actor": "root", "note": "no"}), http.StatusConflict, "approval_decided")
	if !strings.Contains(e.Error.Message, "granted") {
		t.Fatalf("approval_decided message: %q", e.Error.Message)
	}
	if l := decode[approvalsResp](t, f.do(http.MethodGet, "/v1/approvals", tokenAcme, nil)); len(l.Approvals) != 0 {
		t.Fatalf("a granted approval is still listed: %+v", l)
	}
	// The single approval takes no query: a ?tenant= there would seem obeyed.
	wantError(t, f.do(http.MethodGet, approvalPath(a.ID, "")+"?tenant=globex", tokenAdmin, nil), http.StatusBadRequest, "invalid_input")

	// Proceed exactly once, then the row is an ordinary row.
	p := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK)
	if p.Decision != ledger.DecisionProceed || p.Row.Attempt != 1 || p.Row.Key != key {
		t.Fatalf("claim after the grant: %s attempt %d", p.Decision, p.Row.Attempt)
	}
	if r := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusConflict); r.Decision != ledger.DecisionWait {
		t.Fatalf("second claim after the grant: %s", r.Decision)
	}
	f.report(tokenAcme, key, okOutcome)
	if r := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK); r.Decision != ledger.DecisionReplay {
		t.Fatalf("after success: %s", r.Decision)
	}
	if v := f.metricValue("reconciler_claims_total", map[string]string{"decision": "await_approval"}); v != 1 {
		t.Fatalf("reconciler_claims_total{decision=await_approval}: %v", v)
	}
	for _, tok := range []string{tokenAcme, tokenAcmeApprover, tokenAdmin} {
		if strings.Contains(f.logs.String(), tok) {
			t.Fatal("a token reached the logs")
		}
	}
	if !strings.Contains(f.logs.String(), "approval decided") {
		t.Fatal("the decision is not logged")
	}
}

func TestApprovalDenyAndExpire(t *testing.T) {
	t.Run("deny: failed_poison, claims stop with approval_denied", func(t *testing.T) {
		f := newGateFixture(t, approvalTool())
		a := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusAccepted).Row.Approval
		wantError(t, f.do(http.MethodPost, approvalPath(a.ID, "deny"), tokenAcmeApprover, map[string]any{"actor": "bob"}), http.StatusBadRequest, "invalid_input")
		d := f.decideApproval(tokenAdmin, a.ID, "deny", map[string]any{"actor": "bob", "note": "wrong customer"}, http.StatusOK)
		if d.Approval.State != ledger.ApprovalDenied || d.Row.Status != ledger.StatusFailedPoison || d.Row.Resolution.Source != ledger.SourceHuman {
			t.Fatalf("denied: %+v %s", d.Approval, d.Row.Status)
		}
		r := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK)
		if r.Decision != ledger.DecisionStop || r.Code != ledger.CodeApprovalDenied {
			t.Fatalf("claim after denial: %s/%s", r.Decision, r.Code)
		}
		if v := f.metricValue("reconciler_transitions_total", map[string]string{"from": "pending", "to": "failed_poison", "source": "human"}); v != 1 {
			t.Fatalf("transition metric: %v", v)
		}
	})
	t.Run("expired: too late to decide; claims stop with approval_expired", func(t *testing.T) {
		f := newGateFixture(t, approvalTool())
		a := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusAccepted).Row.Approval
		f.clock.Advance(fixtureTTL)
		wantError(t, f.do(http.MethodPost, approvalPath(a.ID, "approve"), tokenAcmeApprover, approve), http.StatusConflict, "approval_expired")
		r := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK)
		if r.Decision != ledger.DecisionStop || r.Code != ledger.CodeApprovalExpired || r.Row.Approval.State != ledger.ApprovalExpired {
			t.Fatalf("claim after expiry: %s/%s", r.Decision, r.Code)
		}
		wantError(t, f.do(http.MethodPost, approvalPath(a.ID, "approve"), tokenAcmeApprover, approve), http.StatusConflict, "approval_decided")
		got := decode[approvalResp](t, f.do(http.MethodGet, approvalPath(a.ID, ""), tokenAcme, nil))
		if got.Approval.State != ledger.ApprovalExpired || got.Approval.Actor != ledger.ExpiryActor {
			t.Fatalf("GET after expiry: %+v", got.Approval)
		}
	})
}

// TestApprovalWakesLongPoll: a claim long-polling an awaiting row answers
// proceed as soon as an approver grants it.
func TestApprovalWakesLongPoll(t *testing.T) {
	f := newGateFixture(t, approvalTool())
	a := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusAccepted).Row.Approval
	done := make(chan claimResp, 1)
	go func() {
		rec := f.do(http.MethodPost, "/v1/claims?wait=20s", tokenAcme, newClaim("run_1"))
		if rec.Code != http.StatusOK {
			t.Errorf("long poll: %d %s", rec.Code, rec.Body.String())
		}
		done <- decode[claimResp](t, rec)
	}()
	testkit.Eventually(t, "the long poll", func() bool { return f.metricValue("reconciler_claim_waiters", nil) == 1 })
	start := time.Now()
	f.decideApproval(tokenAcmeApprover, a.ID, "approve", approve, http.StatusOK)
	select {
	case got := <-done:
		if got.Decision != ledger.DecisionProceed || got.Row.Attempt != 1 {
			t.Fatalf("long poll answered %s attempt %d", got.Decision, got.Row.Attempt)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the grant did not wake the long poll")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll did not end after the grant")
	}
}

func TestGateFromTheRegistry(t *testing.T) {
	checked := paymentTool()
	tests := []struct {
		name       string
		tool       map[string]any
		claim      claimReq
		status     int
		decision   ledger.Decision
		wantReason string
	}{
		{name: "autonomous and checked proceeds", tool: checked, claim: newClaim("run_1"), status: 201, decision: ledger.DecisionProceed},
		{name: "an open checklist box asks", tool: toolWith("checklist", map[string]any{"side_effect_documented": true, "checked_by": "alice"}), claim: newClaim("run_1"),
			status: 202, decision: ledger.DecisionAwaitApproval, wantReason: "checklist not complete: key_born_in_runtime, ledger_or_unique_field, timeout_leaves_unknown, error_classes_mapped, duplicate_delivery_test"},
		{name: "write_irreversible asks", tool: toolWith("class", "write_irreversible"), claim: newClaim("run_1").with("tool_class", "write_irreversible"),
			status: 202, decision: ledger.DecisionAwaitApproval, wantReason: "a write_irreversible tool is never autonomous"},
		{name: "a policy that holds proceeds", tool: toolWith("policy", `intent.amount <= 50000 && intent.currency == "usd"`), claim: newClaim("run_1"),
			status: 201, decision: ledger.DecisionProceed},
		{name: "a policy that is false asks, with the expression", tool: toolWith("policy", `intent.amount <= 1000 && intent.currency == "usd"`), claim: newClaim("run_1"),
			status: 202, decision: ledger.DecisionAwaitApproval, wantReason: `policy: intent.amount <= 1000 && intent.currency == "usd"`},
		{name: "a policy that cannot be evaluated asks (fail closed)", tool: toolWith("policy", `intent.total <= 1000`), claim: newClaim("run_1"),
			status: 202, decision: ledger.DecisionAwaitApproval, wantReason: "policy could not be evaluated (fail closed): evaluate policy: no such key: total"},
		{name: "the policy reads tenant, run_id and tool", tool: toolWith("policy", `tenant == "acme" && run_id == "run_ok" && tool == "stripe.create_payment_intent"`),
			claim: newClaim("run_ok"), status: 201, decision: ledger.DecisionProceed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newGateFixture(t, tt.tool)
			got := f.mustClaim(tokenAcme, tt.claim, tt.status)
			if got.Decision != tt.decision {
				t.Fatalf("decision: got %s, want %s", got.Decision, tt.decision)
			}
			if tt.wantReason != "" && (got.Row.Approval == nil || got.Row.Approval.Reason != tt.wantReason) {
				t.Fatalf("reason: got %+v, want %q", got.Row.Approval, tt.wantReason)
			}
		})
	}
	t.Run("the kill switch wins over the gate", func(t *testing.T) {
		f := newGateFixture(t, approvalTool())
		f.freeze("acme", "stripe.create_payment_intent")
		got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusLocked)
		if got.Decision != ledger.DecisionStop || got.Code != ledger.CodeToolFrozen || got.Row != nil {
			t.Fatalf("frozen gated claim: %s/%s", got.Decision, got.Code)
		}
		if l := decode[approvalsResp](t, f.do(http.MethodGet, "/v1/approvals", tokenAcme, nil)); len(l.Approvals) != 0 {
			t.Fatal("a frozen claim asked for approval")
		}
	})
	t.Run("a row keeps the gate it was claimed under", func(t *testing.T) {
		f := newGateFixture(t, paymentTool())
		key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
		f.report(tokenAcme, key, timeoutOutcome)
		f.putTool(tokenAcme, "stripe.create_payment_intent", approvalTool(), http.StatusOK)
		// The call was made already: a retry with the same key is no new side effect.
		if got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK); got.Decision != ledger.DecisionRetrySameKey || got.Row.Approval != nil {
			t.Fatalf("retry of an ungated row after gating the tool: %s", got.Decision)
		}
		// A new intent is gated.
		if got := f.mustClaim(tokenAcme, newClaim("run_2"), http.StatusAccepted); got.Decision != ledger.DecisionAwaitApproval {
			t.Fatalf("new key: %s", got.Decision)
		}
	})
}

func TestApprovalRouteErrors(t *testing.T) {
	id := ledger.ApprovalID("acme", "no-such-key")
	tests := []struct {
		name   string
		method string
		target string
		token  string
		body   any
		status int
		code   string
	}{
		{name: "no token", method: http.MethodGet, target: "/v1/approvals", status: 401, code: "unauthorized"},
		{name: "a tenant token may not approve", method: http.MethodPost, target: approvalPath(id, "approve"), token: tokenAcme, body: approve, status: 403, code: "forbidden"},
		{name: "a tenant token may not deny", method: http.MethodPost, target: approvalPath(id, "deny"), token: tokenAcme, body: approve, status: 403, code: "forbidden"},
		{name: "an approver may not register tools", method: http.MethodPut, target: toolPath("x"), token: tokenAcmeApprover, body: paymentTool(), status: 403, code: "forbidden"},
		{name: "an approver may not read rows", method: http.MethodGet, target: "/v1/claims", token: tokenAcmeApprover, status: 403, code: "forbidden"},
		{name: "a bad id", method: http.MethodGet, target: approvalPath("ap_nope", ""), token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "a bad id to approve", method: http.MethodPost, target: approvalPath("ap_nope", "approve"), token: tokenAdmin, body: approve, status: 400, code: "invalid_input"},
		{name: "no such approval", method: http.MethodGet, target: approvalPath(id, ""), token: tokenAdmin, status: 404, code: "not_found"},
		{name: "approve no such approval", method: http.MethodPost, target: approvalPath(id, "approve"), token: tokenAcmeApprover, body: approve, status: 404, code: "not_found"},
		{name: "no actor", method: http.MethodPost, target: approvalPath(id, "approve"), token: tokenAdmin, body: map[string]any{"note": "ok"}, status: 400, code: "invalid_input"},
		{name: "an actor with a newline", method: http.MethodPost, target: approvalPath(id, "approve"), token: tokenAdmin, body: map[string]any{"actor": "a\nb"}, status: 400, code: "invalid_input"},
		{name: "an unknown field", method: http.MethodPost, target: approvalPath(id, "approve"), token: tokenAdmin, body: map[string]any{"actor": "a", "state": "granted"}, status: 400, code: "bad_json"},
		{name: "no body", method: http.MethodPost, target: approvalPath(id, "approve"), token: tokenAdmin, status: 400, code: "bad_json"},
		{name: "another state", method: http.MethodGet, target: "/v1/approvals?state=granted", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "an unknown parameter", method: http.MethodGet, target: "/v1/approvals?status=requested", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "a bad limit", method: http.MethodGet, target: "/v1/approvals?limit=0", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "a bad cursor", method: http.MethodGet, target: "/v1/approvals?cursor=xyz", token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "another tenant's list", method: http.MethodGet, target: "/v1/approvals?tenant=globex", token: tokenAcmeApprover, status: 403, code: "forbidden"},
		{name: "a bad tenant", method: http.MethodGet, target: "/v1/approvals?tenant=a.b", token: tokenAdmin, status: 400, code: "invalid_input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newGateFixture(t, nil)
			wantError(t, f.do(tc.method, tc.target, tc.token, tc.body), tc.status, tc.code)
		})
	}
	t.Run("a token that is both a tenant's and an approver's is refused", func(t *testing.T) {
		_, err := api.New(api.Options{Store: memstore.New(ledger.DefaultPolicy()), Tokens: map[string]string{tokenAcme: "acme"},
			ApproverTokens: map[string]string{tokenAcme: "acme"}})
		if err == nil {
			t.Fatal("api.New accepted a token that could approve its own claims")
		}
	})
}

func TestApprovalListPages(t *testing.T) {
	f := newGateFixture(t, approvalTool())
	for i := range 5 {
		f.mustClaim(tokenAcme, newClaim("run_"+string(rune('a'+i))), http.StatusAccepted)
		f.clock.Advance(time.Minute) // later requests expire later
	}
	var got []time.Time
	cursor := ""
	for pages := 0; pages < 10; pages++ {
		target := "/v1/approvals?limit=2"
		if cursor != "" {
			target += "&cursor=" + cursor
		}
		l := decode[approvalsResp](t, f.do(http.MethodGet, target, tokenAcmeApprover, nil))
		for _, a := range l.Approvals {
			got = append(got, a.Approval.ExpiresAt)
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	if len(got) != 5 {
		t.Fatalf("paged through %d approvals, want 5", len(got))
	}
	for i := 1; i < len(got); i++ {
		if !got[i].After(got[i-1]) {
			t.Fatalf("not soonest to expire first: %v", got)
		}
	}
}
