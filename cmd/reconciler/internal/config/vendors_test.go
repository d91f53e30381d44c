package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/vendors"
)

func TestVendorsConfig(t *testing.T) {
	env := map[string]string{"RESEND_API_KEY": "re_live_secret_42", "CRM_TOKEN": "crm_secret_77"}
	doc := `
standard:
  endpoints:
    - name: mailer
      secrets: ["whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="]
      local_id_path: data.tags.metadata_local_id
      vendor: legacy-mail
      replay_window: 6h
vendors:
  - name: resend
    preset: resend
    api_key: ${RESEND_API_KEY}
  - name: crm
    api_base: https://crm.example.com
    auth: {header: Authorization, value: "Bearer ${CRM_TOKEN}"}
    idempotency: {body: request_id}
    max_key_len: 40
    replay_window: 1h
`
	c, err := Parse("cfg.yaml", []byte(doc), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		vendor string
		want   time.Duration
	}{{"resend", 24 * time.Hour}, {"crm", time.Hour}, {"legacy-mail", 6 * time.Hour}, {"unknown", 0}} {
		if got := c.ReplayWindow(tc.vendor, nil); got != tc.want {
			t.Errorf("ReplayWindow(%s) = %v, want %v", tc.vendor, got, tc.want)
		}
	}
	minted := strings.Repeat("ab", 32)
	if got := c.VendorKey("crm", minted); len(got) != 40 {
		t.Errorf("crm vendor key %q: want 40 characters", got)
	}
	if got := c.VendorKey("stripe", minted); got != minted {
		t.Errorf("stripe vendor key %q: want the key", got)
	}
	if n := len(c.Profiles()); n != 3 {
		t.Errorf("%d profiles, want resend, crm and legacy-mail", n)
	}
	if p, ok := c.Profile("legacy-mail"); !ok || p.Idempotency.Header != "Idempotency-Key" || p.Callable() {
		t.Errorf("standard endpoint as a profile: %+v %v", p, ok)
	}
	logged := c.String() + fmt.Sprintf("%v %#v", c, c.Redacted())
	for _, s := range []string{"re_live_secret_42", "crm_secret_77"} {
		if strings.Contains(logged, s) {
			t.Errorf("config text leaks %s", s)
		}
	}
	if c.Vendors[0].APIKey != "re_live_secret_42" || c.Redacted().Vendors[0].APIKey != vendors.Redacted {
		t.Error("Redacted changed the original or missed api_key")
	}
}

func TestVendorsConfigErrors(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"line of a lookup", "vendors:\n  - name: x\n    api_base: https://x.example\n    lookup:\n      url: /q\n      results_path: r\n", "cfg.yaml:5: vendors[0].lookup.url"},
		{"unset variable", "vendors:\n  - name: x\n    auth: {header: A, value: \"${NOPE}\"}\n", "cfg.yaml:3: vendors[0].auth.value: ${NOPE} is not set"},
		{"stripe is code", "vendors:\n  - name: stripe\n", "vendors[0].name: stripe has its own block"},
		{"two windows", "standard:\n  endpoints:\n    - name: r\n      secrets: [\"whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=\"]\n      local_id_path: a.b\n      replay_window: 2h\nvendors:\n  - name: r\n    idempotency: {header: K}\n    replay_window: 1h\n", "cfg.yaml:6: standard.endpoints[0].replay_window"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("cfg.yaml", []byte(tc.doc), func(string) string { return "" })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
