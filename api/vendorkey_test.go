package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/api"
)

// TestVendorKeyOnEveryRow: a claim stores the vendor's key (the profile's
// derivation, here a cut to 45 characters) and every answer that carries
// the row — the claim, GET, the list, an outcome, a compensation — and
// every outbox event carry it; the stored request envelope never does.
func TestVendorKeyOnEveryRow(t *testing.T) {
	f := newFixture(t, func(o *api.Options) {
		o.VendorKey = func(vendor, key string) string {
			if vendor == "square" {
				return "sq-" + key[:42]
			}
			return key
		}
	})
	c := newClaim("run_vk").with("vendor", "square", "tool", "square.payments.create",
		"request", map[string]any{"method": "POST", "path": "/v2/payments", "content_type": "application/json", "body": `{"amount_money":{"amount":100}}`})
	rec := f.do(http.MethodPost, "/v1/claims", tokenAcme, c)
	if rec.Code != http.StatusCreated {
		t.Fatalf("claim: %d %s", rec.Code, rec.Body)
	}
	cl := decode[claimResp](t, rec)
	key, vk := cl.Row.Key, cl.Row.VendorKey
	if len(vk) != 45 || vk != "sq-"+key[:42] {
		t.Fatalf("claim row vendor_key %q for key %q", vk, key)
	}
	if strings.Contains(cl.Row.Request.Body, vk) {
		t.Error("the stored request envelope holds the vendor key")
	}
	// The same intent again: the stored key, whatever the rule says now.
	if again := decode[claimResp](t, f.do(http.MethodPost, "/v1/claims", tokenAcme, c)); again.Row.VendorKey != vk {
		t.Errorf("second claim (%s) vendor_key %q, want %q", again.Decision, again.Row.VendorKey, vk)
	}
	if got := decode[rowResp](t, f.do(http.MethodGet, "/v1/claims/"+key, tokenAcme, nil)); got.Row.VendorKey != vk {
		t.Errorf("GET vendor_key %q", got.Row.VendorKey)
	}
	if got := decode[listResp](t, f.do(http.MethodGet, "/v1/claims?run_id=run_vk", tokenAcme, nil)); len(got.Rows) != 1 || got.Rows[0].VendorKey != vk {
		t.Errorf("list rows %+v", got.Rows)
	}
	out := f.do(http.MethodPost, "/v1/claims/"+key+"/outcome", tokenAcme, map[string]any{"kind": "response", "http_status": 200, "receipt_id": "pay_1", "attempt": 1})
	if got := decode[rowResp](t, out); got.Row.VendorKey != vk {
		t.Errorf("outcome answer vendor_key %q (%d %s)", got.Row.VendorKey, out.Code, out.Body)
	}
	comp := decode[claimResp](t, f.do(http.MethodPost, "/v1/claims/"+key+"/compensations", tokenAcme, map[string]any{"action": "refund"}))
	if comp.Row == nil || comp.Row.VendorKey != "sq-"+comp.Row.Key[:42] {
		t.Errorf("compensation row %+v: want its own derived vendor key", comp.Row)
	}
	recs, err := f.store.PendingEvents(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Event.Key == key {
			n++
			if r.Event.VendorKey != vk {
				t.Errorf("event %s vendor_key %q", r.Event.Status, r.Event.VendorKey)
			}
		}
	}
	if n == 0 {
		t.Error("no outbox event for the row")
	}
}
