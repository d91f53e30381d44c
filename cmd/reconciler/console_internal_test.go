package main

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
)

// TestConsoleWiring: an admin looks at every configured tenant, and the
// timeline says how each vendor's endpoints verify a delivery.
func TestConsoleWiring(t *testing.T) {
	cfg := config.Default()
	cfg.Tenants = []config.Tenant{{ID: "globex", Tokens: []string{"t1"}}, {ID: "acme", Tokens: []string{"t2"}, ApproverTokens: []string{"a1"}}}
	cfg.Stripe.Endpoints = []config.StripeEndpoint{{Name: "default", Tenant: "acme"}}
	cfg.PayPal.Endpoints = []config.PayPalEndpoint{{Name: "p", Tenant: "acme", Verify: "postback"}}
	cfg.Standard.Endpoints = []config.StandardEndpoint{{Name: "mail", Tenant: "acme", Vendor: "resend"}}
	if got := consoleTenants(cfg); !slices.Equal(got, []string{"acme", "globex"}) {
		t.Fatalf("tenants %v", got)
	}
	v := webhookVerification(cfg)
	if got := slices.Sorted(maps.Keys(v)); !slices.Equal(got, []string{"paypal", "resend", "stripe"}) {
		t.Fatalf("vendors %v", got)
	}
	for vendor, want := range map[string]string{"stripe": "Stripe-Signature", "paypal": "postback", "resend": "Standard Webhooks signature (HMAC-SHA256 of id.timestamp.body) at endpoint mail"} {
		if !strings.Contains(v[vendor], want) {
			t.Errorf("%s: %q lacks %q", vendor, v[vendor], want)
		}
	}
	cfg.PayPal.Endpoints = append(cfg.PayPal.Endpoints, config.PayPalEndpoint{Name: "o", Tenant: "acme", Verify: "offline"})
	if got := webhookVerification(cfg)["paypal"]; !strings.Contains(got, "offline") || !strings.Contains(got, "postback") {
		t.Errorf("paypal with both modes: %q", got)
	}
}

// TestConsoleSwitch: the console is served by default, and console.enabled
// false leaves /console to the API (404).
func TestConsoleSwitch(t *testing.T) {
	for _, tc := range []struct {
		enabled string
		want    int
	}{{"", http.StatusOK}, {"false", http.StatusNotFound}} {
		env := maps.Clone(e2eEnv)
		if tc.enabled != "" {
			env["RECONCILER_CONSOLE_ENABLED"] = tc.enabled
		}
		m := startMain(t, env, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
		resp, err := http.Get("http://" + m.HTTPAddr() + "/console/signin")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("console.enabled %q: GET /console/signin = %d, want %d", tc.enabled, resp.StatusCode, tc.want)
		}
	}
}
