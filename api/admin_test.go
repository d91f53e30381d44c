package api_test

import (
	"net/http"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

func TestCompensations(t *testing.T) {
	refund := map[string]any{"action": "refund"}
	tests := []struct {
		name   string
		setup  func(f *fixture, key string) // after the original's claim
		body   any
		status int
		code   string // error code
		want   ledger.Decision
	}{
		{name: "original pending", body: refund, status: 409, code: "compensation_pending"},
		{name: "original unknown", setup: func(f *fixture, key string) { f.report(tokenAcme, key, timeoutOutcome) },
			body: refund, status: 409, code: "compensation_pending"},
		{name: "original failed", setup: func(f *fixture, key string) { f.report(tokenAcme, key, declined) },
			body: refund, status: 422, code: "compensation_failed"},
		{name: "original succeeded", setup: func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) },
			body: refund, status: 201, want: ledger.DecisionProceed},
		{name: "frozen tool", setup: func(f *fixture, key string) {
			f.report(tokenAcme, key, okOutcome)
			f.freeze("acme", "stripe.create_payment_intent")
		}, body: refund, status: 423, want: ledger.DecisionStop},
		{name: "bad action", setup: func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) },
			body: map[string]any{"action": "re fund"}, status: 400, code: "invalid_input"},
		{name: "unknown field", setup: func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) },
			body: map[string]any{"action": "refund", "amount": 5}, status: 400, code: "bad_json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
			if tc.setup != nil {
				tc.setup(f, key)
			}
			rec := f.do(http.MethodPost, "/v1/claims/"+key+"/compensations", tokenAcme, tc.body)
			if tc.code != "" {
				wantError(t, rec, tc.status, tc.code)
				return
			}
			wantStatus(t, rec, tc.status)
			got := decode[claimResp](t, rec)
			if got.Decision != tc.want {
				t.Fatalf("decision: got %s, want %s", got.Decision, tc.want)
			}
			if tc.want == ledger.DecisionProceed {
				if got.Row.CompensationOf != key || got.Row.CompensationAction != "refund" || got.Row.Key != ledger.CompensationKey(key, "refund") {
					t.Fatalf("compensation row: of %q action %q key %q", got.Row.CompensationOf, got.Row.CompensationAction, got.Row.Key)
				}
			}
		})
	}
}

func TestCompensationRepeatFindsTheFirstRow(t *testing.T) {
	f := newFixture(t)
	key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
	f.report(tokenAcme, key, okOutcome)
	target := "/v1/claims/" + key + "/compensations"
	first := f.do(http.MethodPost, target, tokenAcme, map[string]any{"action": "refund"})
	wantStatus(t, first, http.StatusCreated)
	comp := decode[claimResp](t, first).Row.Key

	second := f.do(http.MethodPost, target, tokenAcme, map[string]any{"action": "refund"})
	wantStatus(t, second, http.StatusConflict)
	if got := decode[claimResp](t, second); got.Decision != ledger.DecisionWait || got.Row.Key != comp {
		t.Fatalf("second request while in flight: got %s on %s, want wait on %s", got.Decision, got.Row.Key, comp)
	}

	f.report(tokenAcme, comp, map[string]any{"kind": "response", "http_status": 200, "receipt_id": "re_1"})
	third := f.do(http.MethodPost, target, tokenAcme, map[string]any{"action": "refund"})
	wantStatus(t, third, http.StatusOK)
	if got := decode[claimResp](t, third); got.Decision != ledger.DecisionReplay || got.Row.Key != comp || got.Row.UpstreamReceiptID != "re_1" {
		t.Fatalf("third request after success: got %s on %s receipt %q", got.Decision, got.Row.Key, got.Row.UpstreamReceiptID)
	}

	other := f.do(http.MethodPost, target, tokenAcme, map[string]any{"action": "void"})
	wantStatus(t, other, http.StatusCreated)
	if got := decode[claimResp](t, other); got.Row.Key == comp {
		t.Fatal("another action reused the refund's key")
	}
}

func TestResolve(t *testing.T) {
	ok := map[string]any{"tenant": "acme", "status": "succeeded", "receipt_id": "pi_77", "note": "found in the Stripe dashboard"}
	with := func(kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range ok {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(out, kv[i].(string))
			} else {
				out[kv[i].(string)] = kv[i+1]
			}
		}
		return out
	}
	tests := []struct {
		name   string
		setup  func(f *fixture, key string)
		token  string
		body   any
		key    string // overrides the claimed key
		status int
		code   string
		want   ledger.Status
		actor  string
	}{
		{name: "tenant token is forbidden", token: tokenAcme, body: ok, status: 403, code: "forbidden"},
		{name: "other tenant token is forbidden", token: tokenGlobex, body: ok, status: 403, code: "forbidden"},
		{name: "no token", token: "", body: ok, status: 401, code: "unauthorized"},
		{name: "admin resolves a pending row", token: tokenAdmin, body: ok, status: 200, want: ledger.StatusSucceeded, actor: "admin"},
		{name: "admin names the actor", token: tokenAdmin, body: with("actor", "alice@ops", "status", "failed_poison", "receipt_id", nil),
			setup: func(f *fixture, key string) { f.report(tokenAcme, key, timeoutOutcome) }, status: 200, want: ledger.StatusFailedPoison, actor: "alice@ops"},
		{name: "the same status again is a no-op", token: tokenAdmin, body: ok,
			setup: func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) }, status: 200, want: ledger.StatusSucceeded},
		{name: "succeeded to failed_poison is refused", token: tokenAdmin, body: with("status", "failed_poison"),
			setup: func(f *fixture, key string) { f.report(tokenAcme, key, okOutcome) }, status: 409, code: "invalid_transition"},
		{name: "note is required", token: tokenAdmin, body: with("note", " "), status: 400, code: "invalid_input"},
		{name: "note missing", token: tokenAdmin, body: with("note", nil), status: 400, code: "invalid_input"},
		{name: "status pending", token: tokenAdmin, body: with("status", "pending"), status: 400, code: "invalid_input"},
		{name: "tenant missing", token: tokenAdmin, body: with("tenant", nil), status: 400, code: "invalid_input"},
		{name: "actor with a newline", token: tokenAdmin, body: with("actor", "eve\nadmin"), status: 400, code: "invalid_input"},
		{name: "row of another tenant", token: tokenAdmin, body: with("tenant", "globex"), status: 404, code: "not_found"},
		{name: "unknown key", token: tokenAdmin, body: ok, key: "nope", status: 404, code: "not_found"},
		{name: "unknown field", token: tokenAdmin, body: with("force", true), status: 400, code: "bad_json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
			if tc.setup != nil {
				tc.setup(f, key)
			}
			before := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+key, tokenAcme, nil)).Row
			target := key
			if tc.key != "" {
				target = tc.key
			}
			rec := f.do(http.MethodPost, "/v1/claims/"+target+"/resolve", tc.token, tc.body)
			if tc.code != "" {
				wantError(t, rec, tc.status, tc.code)
				after := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+key, tokenAcme, nil)).Row
				if after.Status != before.Status || !after.UpdatedAt.Equal(before.UpdatedAt) {
					t.Fatalf("a refused resolution changed the row: %s → %s", before.Status, after.Status)
				}
				return
			}
			wantStatus(t, rec, tc.status)
			row := decode[rowResp](t, rec).Row
			if row.Status != tc.want {
				t.Fatalf("status: got %s, want %s", row.Status, tc.want)
			}
			if tc.actor != "" {
				res := row.Resolution
				if res == nil || res.Source != ledger.SourceHuman || res.Actor != tc.actor || res.Note == "" {
					t.Fatalf("resolution: got %+v, want source human, actor %s and the note", res, tc.actor)
				}
				if got := f.metricValue("reconciler_transitions_total", map[string]string{"source": "human", "to": string(tc.want)}); got != 1 {
					t.Errorf("reconciler_transitions_total{source=human,to=%s}: got %v, want 1", tc.want, got)
				}
			}
		})
	}
}

func TestAuth(t *testing.T) {
	f := newFixture(t)
	key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
	routes := []struct {
		method, target string
		body           any
		admin          bool // the route is for admin tokens only
		adminMay       bool // admin tokens may use it too (reads with ?tenant=)
	}{
		{method: http.MethodPost, target: "/v1/claims", body: newClaim("run_2")},
		{method: http.MethodGet, target: "/v1/claims?tenant=acme", adminMay: true},
		{method: http.MethodGet, target: "/v1/claims/" + key + "?tenant=acme", adminMay: true},
		{method: http.MethodPost, target: "/v1/claims/" + key + "/outcome", body: timeoutOutcome},
		{method: http.MethodPost, target: "/v1/claims/" + key + "/compensations", body: map[string]any{"action": "refund"}},
		{method: http.MethodPost, target: "/v1/claims/" + key + "/resolve", body: map[string]any{"tenant": "acme", "status": "succeeded", "note": "n"}, admin: true},
	}
	headers := []struct {
		name, header string
	}{
		{name: "no header", header: ""},
		{name: "basic scheme", header: "Basic " + tokenAcme},
		{name: "unknown token", header: "Bearer tok_acme_6f1d0c2b9e8a4f7e"},
		{name: "token prefix", header: "Bearer " + tokenAcme[:len(tokenAcme)-1]},
		{name: "empty bearer", header: "Bearer "},
	}
	for _, r := range routes {
		for _, h := range headers {
			t.Run(r.method+" "+r.target+"/"+h.name, func(t *testing.T) {
				req := newRequest(t, r.method, r.target, r.body)
				if h.header != "" {
					req.Header.Set("Authorization", h.header)
				}
				rec := serve(f, req)
				wantError(t, rec, http.StatusUnauthorized, "unauthorized")
				if rec.Header().Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
		t.Run(r.method+" "+r.target+"/wrong role", func(t *testing.T) {
			switch {
			case r.admin:
				wantError(t, f.do(r.method, r.target, tokenAcme, r.body), http.StatusForbidden, "forbidden")
			case !r.adminMay:
				wantError(t, f.do(r.method, r.target, tokenAdmin, r.body), http.StatusForbidden, "forbidden")
			default:
				wantStatus(t, f.do(r.method, r.target, tokenAdmin, r.body), http.StatusOK)
			}
		})
	}
	t.Run("scheme is case-insensitive", func(t *testing.T) {
		req := newRequest(t, http.MethodGet, "/v1/claims/"+key, nil)
		req.Header.Set("Authorization", "bearer "+tokenAcme)
		wantStatus(t, serve(f, req), http.StatusOK)
	})
	t.Run("the body never names the tenant", func(t *testing.T) {
		rec := f.do(http.MethodPost, "/v1/claims", tokenGlobex, newClaim("run_9").with("tenant", "acme"))
		wantError(t, rec, http.StatusBadRequest, "bad_json")
	})
}
