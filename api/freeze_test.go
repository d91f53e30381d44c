package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/freeze"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

const frozenTool = "stripe.create_payment_intent" // newClaim's tool

type freezeResp struct {
	Freeze ledger.Freeze `json:"freeze"`
}

type freezesResp struct {
	Freezes []ledger.Freeze `json:"freezes"`
}

// withKillSwitch serves the fixture's kill switch from a freeze.Cache over
// its own store (instead of the fixture's map) and hands the cache out.
func withKillSwitch(c **freeze.Cache) func(*api.Options) {
	return func(o *api.Options) {
		*c = freeze.New(o.Store.(*memstore.Store), freeze.Options{})
		o.KillSwitch, o.Frozen = *c, nil
	}
}

func newKillSwitchFixture(t *testing.T) (*fixture, *freeze.Cache) {
	t.Helper()
	var c *freeze.Cache
	f := newFixture(t, withKillSwitch(&c))
	return f, c
}

func freezePath(tenant, target string) string { return "/v1/admin/freezes/" + tenant + "/" + target }

// putFreeze freezes through the API and checks for 200.
func (f *fixture) putFreeze(tenant, target string) ledger.Freeze {
	f.t.Helper()
	rec := f.do(http.MethodPut, freezePath(tenant, target), tokenAdmin, map[string]any{"note": "vendor incident INC-7", "actor": "alice@ops"})
	wantStatus(f.t, rec, http.StatusOK)
	return decode[freezeResp](f.t, rec).Freeze
}

func (f *fixture) deleteFreeze(tenant, target string) {
	f.t.Helper()
	wantStatus(f.t, f.do(http.MethodDelete, freezePath(tenant, target), tokenAdmin, nil), http.StatusNoContent)
}

// rowsOf lists a tenant's rows through the API.
func (f *fixture) rowsOf(token string) []ledger.Row {
	f.t.Helper()
	rec := f.do(http.MethodGet, "/v1/claims", token, nil)
	wantStatus(f.t, rec, http.StatusOK)
	return decode[listResp](f.t, rec).Rows
}

func TestFreezeRoutes(t *testing.T) {
	note := map[string]any{"note": "Stripe incident"}
	tests := []struct {
		name   string
		method string
		target string
		token  string
		body   any
		status int
		code   string
	}{
		{name: "tenant token may not freeze", method: http.MethodPut, target: freezePath("acme", frozenTool), token: tokenAcme, body: note, status: 403, code: "forbidden"},
		{name: "tenant token may not unfreeze", method: http.MethodDelete, target: freezePath("acme", frozenTool), token: tokenAcme, status: 403, code: "forbidden"},
		{name: "tenant token may not list", method: http.MethodGet, target: "/v1/admin/freezes", token: tokenGlobex, status: 403, code: "forbidden"},
		{name: "no token", method: http.MethodPut, target: freezePath("acme", frozenTool), body: note, status: 401, code: "unauthorized"},
		{name: "bad target", method: http.MethodPut, target: freezePath("acme", "stripe!charge"), token: tokenAdmin, body: note, status: 400, code: "invalid_input"},
		{name: "encoded space in target", method: http.MethodPut, target: freezePath("acme", "a%20b"), token: tokenAdmin, body: note, status: 400, code: "invalid_input"},
		{name: "target too long", method: http.MethodPut, target: freezePath("acme", strings.Repeat("t", 129)), token: tokenAdmin, body: note, status: 400, code: "invalid_input"},
		{name: "bad tenant", method: http.MethodPut, target: freezePath("ac.me", frozenTool), token: tokenAdmin, body: note, status: 400, code: "invalid_input"},
		{name: "bad target on delete", method: http.MethodDelete, target: freezePath("acme", "stripe!charge"), token: tokenAdmin, status: 400, code: "invalid_input"},
		{name: "tenant without a token", method: http.MethodPut, target: freezePath("initech", frozenTool), token: tokenAdmin, body: note, status: 404, code: "not_found"},
		{name: "note is required", method: http.MethodPut, target: freezePath("acme", frozenTool), token: tokenAdmin, body: map[string]any{"actor": "bob"}, status: 400, code: "invalid_input"},
		{name: "blank note", method: http.MethodPut, target: freezePath("acme", frozenTool), token: tokenAdmin, body: map[string]any{"note": " \t"}, status: 400, code: "invalid_input"},
		{name: "actor with a newline", method: http.MethodPut, target: freezePath("acme", frozenTool), token: tokenAdmin, body: map[string]any{"note": "n", "actor": "eve\nadmin"}, status: 400, code: "invalid_input"},
		{name: "unknown field", method: http.MethodPut, target: freezePath("acme", frozenTool), token: tokenAdmin, body: map[string]any{"note": "n", "tenant": "globex"}, status: 400, code: "bad_json"},
		{name: "no body", method: http.MethodPut, target: freezePath("acme", frozenTool), token: tokenAdmin, status: 400, code: "bad_json"},
		{name: "bad tenant filter", method: http.MethodGet, target: "/v1/admin/freezes?tenant=a.b", token: tokenAdmin, status: 400, code: "invalid_input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newKillSwitchFixture(t)
			wantError(t, f.do(tc.method, tc.target, tc.token, tc.body), tc.status, tc.code)
			if got := c.Snapshot(); len(got) != 0 {
				t.Fatalf("a refused request changed the kill switch: %+v", got)
			}
			if fs, _ := c.Load(t.Context()); len(fs) != 0 {
				t.Fatalf("a refused request stored freezes: %+v", fs)
			}
		})
	}
	t.Run("not configured", func(t *testing.T) {
		f := newFixture(t)
		wantError(t, f.do(http.MethodPut, freezePath("acme", frozenTool), tokenAdmin, note), http.StatusNotImplemented, "not_implemented")
		wantError(t, f.do(http.MethodGet, "/v1/admin/freezes", tokenAdmin, nil), http.StatusNotImplemented, "not_implemented")
	})
	t.Run("KillSwitch and Frozen together are refused", func(t *testing.T) {
		st := memstore.New(ledger.DefaultPolicy())
		_, err := api.New(api.Options{
			Store: st, Tokens: map[string]string{tokenAcme: "acme"},
			KillSwitch: freeze.New(st, freeze.Options{}),
			Frozen:     func(string, string, ledger.ToolClass) bool { return false },
		})
		if err == nil {
			t.Fatal("api.New accepted both a KillSwitch and a Frozen func")
		}
	})
}

func TestFreezePutListDelete(t *testing.T) {
	f, c := newKillSwitchFixture(t)
	got := f.putFreeze("acme", frozenTool)
	want := ledger.Freeze{Tenant: "acme", Target: frozenTool, Actor: "alice@ops", Note: "vendor incident INC-7", At: t0}
	if got.Tenant != want.Tenant || got.Target != want.Target || got.Actor != want.Actor || got.Note != want.Note || !got.At.Equal(want.At) {
		t.Fatalf("PUT answered %+v, want %+v", got, want)
	}
	f.clock.Advance(time.Minute)
	// The default actor, and a class; globex's entry sorts after acme's.
	rec := f.do(http.MethodPut, freezePath("globex", "write_irreversible"), tokenAdmin, map[string]any{"note": "legal hold"})
	wantStatus(t, rec, http.StatusOK)
	if g := decode[freezeResp](t, rec).Freeze; g.Actor != api.DefaultActor || !g.At.Equal(t0.Add(time.Minute)) {
		t.Fatalf("PUT without actor: %+v, want actor %s at %v", g, api.DefaultActor, t0.Add(time.Minute))
	}
	f.putFreeze("acme", "write_ledger")

	list := decode[freezesResp](t, f.do(http.MethodGet, "/v1/admin/freezes", tokenAdmin, nil)).Freezes
	var ids []string
	for _, fz := range list {
		ids = append(ids, fz.Tenant+"/"+fz.Target)
	}
	if w := "acme/" + frozenTool + " acme/write_ledger globex/write_irreversible"; strings.Join(ids, " ") != w {
		t.Fatalf("GET lists %q, want %q", ids, w)
	}
	rec = f.do(http.MethodGet, "/v1/admin/freezes?tenant=initech", tokenAdmin, nil)
	wantStatus(t, rec, http.StatusOK)
	if !strings.Contains(rec.Body.String(), `"freezes":[]`) {
		t.Fatalf("empty list: got %s, want \"freezes\":[]", rec.Body.String())
	}
	if got := decode[freezesResp](t, f.do(http.MethodGet, "/v1/admin/freezes?tenant=globex", tokenAdmin, nil)).Freezes; len(got) != 1 || got[0].Target != "write_irreversible" {
		t.Fatalf("?tenant=globex: got %+v", got)
	}

	f.deleteFreeze("acme", "write_ledger")
	f.deleteFreeze("acme", "write_ledger") // idempotent
	f.deleteFreeze("initech", "anything")  // a tenant without a token may be cleared
	if got := c.Snapshot(); len(got) != 2 {
		t.Fatalf("after deletes: %+v, want 2 entries", got)
	}
	for _, line := range []string{"kill switch: frozen", "kill switch: unfrozen", `"actor":"alice@ops"`} {
		if !strings.Contains(f.logs.String(), line) {
			t.Errorf("logs lack %q", line)
		}
	}
	if strings.Contains(f.logs.String(), tokenAdmin) || strings.Contains(f.logs.String(), "INC-7") {
		t.Error("a token or a note reached the logs")
	}
}

func TestKillSwitchStopsClaims(t *testing.T) {
	t.Run("frozen tool: 423 stop tool_frozen, nothing inserted", func(t *testing.T) {
		f, _ := newKillSwitchFixture(t)
		f.putFreeze("acme", frozenTool)
		got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusLocked)
		if got.Decision != ledger.DecisionStop || got.Code != ledger.CodeToolFrozen || got.Row != nil {
			t.Fatalf("claim: got %s/%s row %v, want stop/tool_frozen and no row", got.Decision, got.Code, got.Row)
		}
		if rows := f.rowsOf(tokenAcme); len(rows) != 0 {
			t.Fatalf("a frozen claim inserted %d rows", len(rows))
		}
		// Another tool of the tenant and the same tool of another tenant go on.
		f.mustClaim(tokenAcme, newClaim("run_1").with("tool", "stripe.create_refund"), http.StatusCreated)
		f.mustClaim(tokenGlobex, newClaim("run_1"), http.StatusCreated)
	})
	t.Run("frozen class", func(t *testing.T) {
		f, _ := newKillSwitchFixture(t)
		f.putFreeze("acme", "write_irreversible")
		email := newClaim("run_1").with("tool", "email.send", "vendor", "resend", "tool_class", "write_irreversible")
		got := f.mustClaim(tokenAcme, email, http.StatusLocked)
		if got.Code != ledger.CodeToolFrozen {
			t.Fatalf("claim of a frozen class: code %q", got.Code)
		}
		f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated) // write_idempotent goes on
		f.mustClaim(tokenGlobex, email, http.StatusCreated)
	})
	t.Run("open row waits instead of retrying, and retries once unfrozen", func(t *testing.T) {
		f, _ := newKillSwitchFixture(t)
		key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
		f.report(tokenAcme, key, timeoutOutcome)
		f.putFreeze("acme", frozenTool)
		got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusConflict)
		if got.Decision != ledger.DecisionWait || got.Row == nil || got.Row.Key != key || got.Row.Attempt != 1 {
			t.Fatalf("frozen unknown row: got %s (row %+v), want wait at attempt 1", got.Decision, got.Row)
		}
		f.deleteFreeze("acme", frozenTool)
		got = f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK)
		if got.Decision != ledger.DecisionRetrySameKey || got.Row.Key != key || got.Row.Attempt != 2 {
			t.Fatalf("unfrozen unknown row: got %s attempt %d, want retry_same_key attempt 2", got.Decision, got.Row.Attempt)
		}
	})
	t.Run("succeeded row still replays", func(t *testing.T) {
		f, _ := newKillSwitchFixture(t)
		key := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated).Row.Key
		f.report(tokenAcme, key, okOutcome)
		f.putFreeze("acme", frozenTool)
		if got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusOK); got.Decision != ledger.DecisionReplay || got.Row.UpstreamReceiptID != "pi_123" {
			t.Fatalf("frozen succeeded row: got %s", got.Decision)
		}
	})
	t.Run("unfreeze lets a new claim proceed", func(t *testing.T) {
		f, _ := newKillSwitchFixture(t)
		f.putFreeze("acme", frozenTool)
		f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusLocked)
		f.deleteFreeze("acme", frozenTool)
		if got := f.mustClaim(tokenAcme, newClaim("run_1"), http.StatusCreated); got.Decision != ledger.DecisionProceed {
			t.Fatalf("after unfreeze: %s", got.Decision)
		}
	})
}

func TestFrozenMetric(t *testing.T) {
	f, _ := newKillSwitchFixture(t)
	labels := map[string]string{"tenant": "acme", "target": "write_irreversible"}
	f.putFreeze("acme", "write_irreversible")
	if got := f.metricValue("reconciler_frozen", labels); got != 1 {
		t.Fatalf("reconciler_frozen while frozen: got %v, want 1", got)
	}
	rec := f.do(http.MethodGet, "/metrics", "", nil)
	wantStatus(t, rec, http.StatusOK)
	if want := `reconciler_frozen{target="write_irreversible",tenant="acme"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
	f.deleteFreeze("acme", "write_irreversible")
	if body := f.do(http.MethodGet, "/metrics", "", nil).Body.String(); strings.Contains(body, "reconciler_frozen{") {
		t.Fatal("/metrics still lists the series after unfreezing")
	}
}

// TestKillSwitchAcrossReplicas runs two servers over one store, each with its
// own cache: a freeze through one stops the other's claims once the other
// refreshes (Run's tick; here the GET, which loads).
func TestKillSwitchAcrossReplicas(t *testing.T) {
	var ca, cb *freeze.Cache
	a := newFixture(t, withKillSwitch(&ca))
	b := newFixture(t, func(o *api.Options) {
		cb = freeze.New(a.store, freeze.Options{})
		o.Store, o.KillSwitch, o.Frozen = a.store, cb, nil
	})
	a.putFreeze("acme", frozenTool)
	b.mustClaim(tokenAcme, newClaim("run_1").with("tool_call_id", "before"), http.StatusCreated)
	wantStatus(t, b.do(http.MethodGet, "/v1/admin/freezes", tokenAdmin, nil), http.StatusOK)
	b.mustClaim(tokenAcme, newClaim("run_2"), http.StatusLocked)
	b.deleteFreeze("acme", frozenTool)
	if _, err := ca.Load(t.Context()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	a.mustClaim(tokenAcme, newClaim("run_3"), http.StatusCreated)
}
