package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/registry"
)

type toolResp struct {
	Tool    ledger.Tool `json:"tool"`
	Changed bool        `json:"changed"`
}

type toolGetResp struct {
	Tool ledger.Tool `json:"tool"`
}

type toolsResp struct {
	Tools []ledger.Tool `json:"tools"`
}

// withRegistry serves the fixture's registry from a registry.Cache over its
// own store and hands the cache out.
func withRegistry(c **registry.Cache) func(*api.Options) {
	return func(o *api.Options) {
		*c = registry.New(o.Store.(ledger.Tools), registry.Options{})
		o.Registry = *c
	}
}

func newRegistryFixture(t *testing.T, mods ...func(*api.Options)) (*fixture, *registry.Cache) {
	t.Helper()
	var c *registry.Cache
	f := newFixture(t, append([]func(*api.Options){withRegistry(&c)}, mods...)...)
	return f, c
}

// paymentTool is the registry entry of newClaim's tool, every box checked.
func paymentTool() map[string]any {
	return map[string]any{
		"name": "stripe.create_payment_intent", "vendor": "stripe", "class": "write_idempotent",
		"side_effect": "charge", "key_placement": map[string]any{"header": "Idempotency-Key"},
		"intent_fields": []string{"amount", "currency", "customer"},
		"checklist": map[string]any{
			"side_effect_documented": true, "key_born_in_runtime": true, "ledger_or_unique_field": true,
			"timeout_leaves_unknown": true, "error_classes_mapped": true, "duplicate_delivery_test": true,
			"checked_by": "alice@example.com",
		},
		"autonomy": "autonomous",
	}
}

func toolWith(kv ...any) map[string]any {
	out := paymentTool()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func toolPath(name string) string { return "/v1/tools/" + name }

// putTool registers through the API and checks the status.
func (f *fixture) putTool(token, name string, body any, status int) toolResp {
	f.t.Helper()
	rec := f.do(http.MethodPut, toolPath(name), token, body)
	wantStatus(f.t, rec, status)
	return decode[toolResp](f.t, rec)
}

func TestToolRoutes(t *testing.T) {
	f, _ := newRegistryFixture(t)
	const name = "stripe.create_payment_intent"

	created := f.putTool(tokenAcme, name, paymentTool(), http.StatusCreated)
	got := created.Tool
	if !created.Changed || got.Version != 1 || got.Tenant != "acme" || got.Name != name || !got.CreatedAt.Equal(t0) ||
		!got.UpdatedAt.Equal(t0) || !got.Checklist.CheckedAt.Equal(t0) || got.Autonomy != ledger.AutonomyAutonomous {
		t.Fatalf("PUT of a new tool: %+v", created)
	}

	f.clock.Advance(time.Minute)
	again := f.putTool(tokenAcme, name, paymentTool(), http.StatusOK)
	if again.Changed || again.Tool.Version != 1 || !again.Tool.UpdatedAt.Equal(t0) {
		t.Fatalf("identical PUT: %+v, want unchanged version 1", again)
	}
	// The name may be left out of the body: the path names the tool.
	next := f.putTool(tokenAcme, name, toolWith("name", nil, "policy", "intent.amount < 100"), http.StatusOK)
	if !next.Changed || next.Tool.Version != 2 || !next.Tool.UpdatedAt.Equal(t0.Add(time.Minute)) || !next.Tool.CreatedAt.Equal(t0) {
		t.Fatalf("changed PUT: %+v, want version 2 updated at t0+1m", next)
	}

	rec := f.do(http.MethodGet, toolPath(name), tokenAcme, nil)
	wantStatus(t, rec, http.StatusOK)
	if g := decode[toolGetResp](t, rec).Tool; g.Version != 2 || g.Policy != "intent.amount < 100" {
		t.Fatalf("GET: %+v", g)
	}
	f.putTool(tokenAcme, "email.send", map[string]any{
		"vendor": "resend", "class": "write_irreversible", "side_effect": "email",
		"key_placement": map[string]any{"header": "Idempotency-Key"},
	}, http.StatusCreated)
	list := decode[toolsResp](t, f.do(http.MethodGet, "/v1/tools", tokenAcme, nil)).Tools
	if len(list) != 2 || list[0].Name != "email.send" || list[1].Name != name {
		t.Fatalf("GET /v1/tools: %+v, want email.send then %s", list, name)
	}
	if l := decode[toolsResp](t, f.do(http.MethodGet, "/v1/tools?tenant=acme", tokenAdmin, nil)).Tools; len(l) != 2 {
		t.Fatalf("admin GET ?tenant=acme: %d tools, want 2", len(l))
	}
	rec = f.do(http.MethodGet, "/v1/tools", tokenGlobex, nil)
	wantStatus(t, rec, http.StatusOK)
	if !strings.Contains(rec.Body.String(), `"tools":[]`) {
		t.Fatalf("another tenant's list: %s, want \"tools\":[]", rec.Body.String())
	}
	wantError(t, f.do(http.MethodGet, toolPath(name), tokenGlobex, nil), http.StatusNotFound, "not_found")

	wantStatus(t, f.do(http.MethodDelete, toolPath(name), tokenAcme, nil), http.StatusNoContent)
	e := wantError(t, f.do(http.MethodDelete, toolPath(name), tokenAcme, nil), http.StatusNotFound, "not_found")
	if e.Error.Message != "no such tool" {
		t.Fatalf("404 message: %q", e.Error.Message)
	}
	wantError(t, f.do(http.MethodGet, toolPath(name), tokenAcme, nil), http.StatusNotFound, "not_found")
	for _, line := range []string{"tool registered", "tool unregistered", `"effective_autonomy":"approval"`} {
		if !strings.Contains(f.logs.String(), line) {
			t.Errorf("logs lack %q", line)
		}
	}
}

func TestToolRouteErrors(t *testing.T) {
	const name = "stripe.create_payment_intent"
	placement := func(p map[string]any) map[string]any { return toolWith("key_placement", p) }
	tests := []struct {
		name    string
		method  string
		target  string
		token   string
		body    any
		status  int
		code    string
		message string
	}{
		{name: "no token", method: http.MethodPut, target: toolPath(name), body: paymentTool(), status: 401, code: "unauthorized"},
		{name: "admin may not register", method: http.MethodPut, target: toolPath(name), token: tokenAdmin, body: paymentTool(), status: 403, code: "forbidden"},
		{name: "admin may not delete", method: http.MethodDelete, target: toolPath(name), token: tokenAdmin, status: 403, code: "forbidden"},
		{name: "admin list names no tenant", method: http.MethodGet, target: "/v1/tools", token: tokenAdmin, status: 400, code: "invalid_input"},
		{name: "tenant reads another tenant", method: http.MethodGet, target: "/v1/tools?tenant=globex", token: tokenAcme, status: 403, code: "forbidden"},
		{name: "bad name in the path", method: http.MethodPut, target: toolPath("stripe!charge"), token: tokenAcme, body: paymentTool(), status: 400, code: "invalid_input"},
		{name: "bad name on get", method: http.MethodGet, target: toolPath("a%20b"), token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "bad name on delete", method: http.MethodDelete, target: toolPath("a%20b"), token: tokenAcme, status: 400, code: "invalid_input"},
		{name: "body names another tool", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("name", "stripe.refund"), status: 400, code: "invalid_input"},
		{name: "unknown class", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("class", "write"), status: 400, code: "invalid_input",
			message: `invalid class: want read, write_idempotent, write_ledger or write_irreversible, got "write"`},
		{name: "write without side_effect", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("side_effect", nil), status: 400, code: "invalid_input",
			message: "invalid side_effect: required for a write tool: say what it does (email, charge, crm_write, …)"},
		{name: "no key placement", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("key_placement", nil), status: 400, code: "invalid_input",
			message: "invalid key_placement: want exactly one of header, body_field, external_id_field, argument or none, got 0"},
		{name: "two key placements", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: placement(map[string]any{"header": "Idempotency-Key", "body_field": "k"}), status: 400, code: "invalid_input"},
		{name: "idempotent tool without a key", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: placement(map[string]any{"none": true}), status: 400, code: "invalid_input"},
		{name: "bad header name", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: placement(map[string]any{"header": "Idempotency Key"}), status: 400, code: "invalid_input"},
		{name: "unknown placement", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: placement(map[string]any{"cookie": "k"}), status: 400, code: "bad_json"},
		{name: "checked boxes without a checker", method: http.MethodPut, target: toolPath(name), token: tokenAcme,
			body: toolWith("checklist", map[string]any{"side_effect_documented": true}), status: 400, code: "invalid_input", message: "invalid checklist.checked_by: say who checked the boxes"},
		{name: "unknown autonomy", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("autonomy", "yolo"), status: 400, code: "invalid_input"},
		{name: "unknown field", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("tenant", "globex"), status: 400, code: "bad_json"},
		{name: "version is the store's", method: http.MethodPut, target: toolPath(name), token: tokenAcme, body: toolWith("version", 7), status: 400, code: "bad_json"},
		{name: "no body", method: http.MethodPut, target: toolPath(name), token: tokenAcme, status: 400, code: "bad_json"},
		{name: "a policy that does not compile", method: http.MethodPut, target: toolPath(name), token: tokenAcme,
			body: toolWith("policy", "intent.amount <= 50000 &&\n  intent.currency = \"usd\""), status: 400, code: "invalid_input",
			message: "invalid policy: not a boolean CEL expression over intent, tool, run_id and tenant: line 2, column 19: Syntax error: token recognition error at: '= '; line 2, column 21: Syntax error: extraneous input '\"usd\"' expecting <EOF>"},
		{name: "a policy naming an unknown variable", method: http.MethodPut, target: toolPath(name), token: tokenAcme,
			body: toolWith("policy", "amount < 5"), status: 400, code: "invalid_input",
			message: "invalid policy: not a boolean CEL expression over intent, tool, run_id and tenant: line 1, column 1: undeclared reference to 'amount' (in container '')"},
		{name: "a policy that is not a bool", method: http.MethodPut, target: toolPath(name), token: tokenAcme,
			body: toolWith("policy", "size(tenant)"), status: 400, code: "invalid_input",
			message: "invalid policy: not a boolean CEL expression over intent, tool, run_id and tenant: the expression is int, want a bool"},
		{name: "get of nothing", method: http.MethodGet, target: toolPath(name), token: tokenAcme, status: 404, code: "not_found", message: "no such tool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newRegistryFixture(t)
			e := wantError(t, f.do(tc.method, tc.target, tc.token, tc.body), tc.status, tc.code)
			if tc.message != "" && e.Error.Message != tc.message {
				t.Fatalf("message: got %q, want %q", e.Error.Message, tc.message)
			}
			if got, _ := c.List(t.Context(), "acme"); len(got) != 0 {
				t.Fatalf("a refused request stored tools: %+v", got)
			}
			if _, ok := c.Lookup("acme", name); ok {
				t.Fatal("a refused request registered the tool in memory")
			}
		})
	}
	t.Run("not configured", func(t *testing.T) {
		f := newFixture(t)
		for _, r := range []struct{ method, target string }{
			{http.MethodPut, toolPath(name)}, {http.MethodGet, toolPath(name)}, {http.MethodGet, "/v1/tools"}, {http.MethodDelete, toolPath(name)},
		} {
			wantError(t, f.do(r.method, r.target, tokenAcme, paymentTool()), http.StatusNotImplemented, "not_implemented")
		}
	})
	t.Run("strict without a registry is refused", func(t *testing.T) {
		_, err := api.New(api.Options{Store: newFixture(t).store, Tokens: map[string]string{tokenAcme: "acme"}, StrictRegistry: true})
		if err == nil {
			t.Fatal("api.New accepted a strict registry without a Registry")
		}
	})
}

func TestClaimsOfRegisteredTools(t *testing.T) {
	t.Run("a registered tool is claimed with its vendor and class", func(t *testing.T) {
		f, _ := newRegistryFixture(t)
		f.putTool(tokenAcme, "stripe.create_payment_intent", paymentTool(), http.StatusCreated)
		for _, body := range []claimReq{
			newClaim("run_1").with("vendor", "paypal"),
			newClaim("run_1").with("tool_class", "write_ledger"),
		} {
			e := wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, body), http.StatusUnprocessableEntity, "tool_mismatch")
			if !strings.Contains(e.Error.Message, "registered with vendor stripe and class write_idempotent") {
				t.Fatalf("tool_mismatch message: %q", e.Error.Message)
			}
		}
		if rows := f.rowsOf(tokenAcme); len(rows) != 0 {
			t.Fatalf("a mismatched claim inserted %d rows", len(rows))
		}
		f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated)
		// The registry is per tenant: globex has no such entry.
		f.mustClaim(tokenGlobex, newClaim("run_1").with("vendor", "paypal"), http.StatusCreated)
	})
	t.Run("a claim of a read tool is a mismatch", func(t *testing.T) {
		f, _ := newRegistryFixture(t)
		f.putTool(tokenAcme, "stripe.create_payment_intent", map[string]any{"vendor": "stripe", "class": "read"}, http.StatusCreated)
		wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1")), http.StatusUnprocessableEntity, "tool_mismatch")
	})
	t.Run("an unregistered tool is served as before", func(t *testing.T) {
		f, _ := newRegistryFixture(t)
		f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated)
	})
	t.Run("strict: an unregistered tool is refused", func(t *testing.T) {
		f, _ := newRegistryFixture(t, func(o *api.Options) { o.StrictRegistry = true })
		e := wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_1")), http.StatusUnprocessableEntity, "unregistered_tool")
		if !strings.Contains(e.Error.Message, `"stripe.create_payment_intent" is not registered`) {
			t.Fatalf("message: %q", e.Error.Message)
		}
		f.putTool(tokenAcme, "stripe.create_payment_intent", paymentTool(), http.StatusCreated)
		f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated)
		wantStatus(t, f.do(http.MethodDelete, toolPath("stripe.create_payment_intent"), tokenAcme, nil), http.StatusNoContent)
		wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_2")), http.StatusUnprocessableEntity, "unregistered_tool")
	})
	t.Run("invalid input is 400 before the registry is asked", func(t *testing.T) {
		f, _ := newRegistryFixture(t, func(o *api.Options) { o.StrictRegistry = true })
		wantError(t, f.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run 1")), http.StatusBadRequest, "invalid_input")
	})
}

// TestRegistryAcrossReplicas runs two servers over one store, each with its
// own cache: a registration through one reaches the other's claims once
// the other reloads (Run's tick; here Load).
func TestRegistryAcrossReplicas(t *testing.T) {
	var ca, cb *registry.Cache
	a := newFixture(t, withRegistry(&ca))
	b := newFixture(t, func(o *api.Options) {
		cb = registry.New(a.store, registry.Options{})
		o.Store, o.Registry = a.store, cb
	})
	a.putTool(tokenAcme, "stripe.create_payment_intent", paymentTool(), http.StatusCreated)
	// B reads the store for GET at once, and claims after its reload.
	if l := decode[toolsResp](t, b.do(http.MethodGet, "/v1/tools", tokenAcme, nil)).Tools; len(l) != 1 {
		t.Fatalf("B's GET /v1/tools: %d tools, want 1", len(l))
	}
	b.mustClaim(tokenAcme, newClaim("run_1").with("vendor", "paypal"), http.StatusCreated)
	if err := cb.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantError(t, b.do(http.MethodPost, "/v1/claims", tokenAcme, newClaim("run_2").with("vendor", "paypal")), http.StatusUnprocessableEntity, "tool_mismatch")
	// A delete through B reaches A after A's reload.
	wantStatus(t, b.do(http.MethodDelete, toolPath("stripe.create_payment_intent"), tokenAcme, nil), http.StatusNoContent)
	if err := ca.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.mustClaim(tokenAcme, newClaim("run_3").with("vendor", "paypal"), http.StatusCreated)
}
