package config

import (
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/matcher"
)

const webhooksYAML = okTenant + `webhooks:
  - name: sq
    preset: square
    secrets: ["${SQUARE_SIGNATURE_KEY}", "sq-old-key"]
    url: https://hooks.example.com/webhooks/square/sq
    local_id_path: data.object.payment.note
  - name: acme
    vendor: acmevendor
    secrets: [acme-SeKrEt-1]
    scheme: hmac
    hash: sha512
    signed: "{header:X-Acme-Id}.{ts}.{body}"
    signature: {source: "header:X-Acme-Signature", encoding: hex, prefix: "v1=", separator: ","}
    timestamp: {source: "header:X-Acme-Time", unit: s}
    tolerance: 2m
    event_id: ["{header:X-Acme-Id}"]
    event_type: ["{json:kind}"]
    reject_empty_body: false
    types: {object.created: succeeded}
`

func TestParseWebhooks(t *testing.T) {
	c, err := Parse("cfg.yaml", []byte(webhooksYAML), func(k string) string {
		if k == "SQUARE_SIGNATURE_KEY" {
			return "sq-SeKrEt-key"
		}
		return ""
	})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(c.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want 2", len(c.Webhooks))
	}
	sq, acme := c.Webhooks[0], c.Webhooks[1]
	if sq.Preset != "square" || sq.Tenant != "acme" || sq.Secrets[0] != "sq-SeKrEt-key" || sq.webhookVendor() != "square" || !sq.RejectEmptyBody {
		t.Errorf("square endpoint = %+v", sq)
	}
	if acme.webhookFamily() != "custom" || acme.Signature.Separator != "," || acme.Tolerance != 2*time.Minute ||
		acme.RejectEmptyBody || acme.Types["object.created"] != matcher.Succeeded {
		t.Errorf("custom endpoint = %+v", acme)
	}
	red := c.Redacted()
	if red.Webhooks[0].Secrets[0] != RedactedText || c.Webhooks[0].Secrets[0] != "sq-SeKrEt-key" {
		t.Error("webhooks[0].secrets not redacted in the copy only")
	}
	if strings.Contains(c.String(), "sq-SeKrEt-key") {
		t.Error("a webhook secret reached the config's text")
	}
}

func TestWebhooksErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       string
	}{
		{"no preset and no scheme", okTenant + "webhooks:\n  - name: x\n    vendor: v\n    secrets: [s]\n", `webhooks[0].preset: endpoint "x" names no preset and no scheme`},
		{"no secret", okTenant + "webhooks:\n  - name: x\n    preset: github\n", `webhooks[0].secrets: endpoint "x" has no secret`},
		{"duplicate name in a preset", okTenant + "webhooks:\n  - {name: x, preset: github, secrets: [s]}\n  - {name: x, preset: github, secrets: [t]}\n", `webhooks[1].name: duplicate endpoint name "x"`},
		{"a section's name as preset", okTenant + "webhooks:\n  - {name: x, preset: stripe, secrets: [s]}\n", `"stripe" has its own section`},
		{"relative url", okTenant + "webhooks:\n  - {name: x, preset: square, secrets: [s], url: /webhooks/square/x}\n", `webhooks[0].url: want the absolute http(s) URL`},
		{"bad vendor", okTenant + "webhooks:\n  - {name: x, preset: github, vendor: Git.Hub, secrets: [s]}\n", `webhooks[0].vendor: invalid vendor "Git.Hub"`},
		{"bad action", okTenant + "webhooks:\n  - {name: x, preset: github, secrets: [s], types: {issues.opened: yes}}\n", `invalid action "yes"`},
		{"unknown knob", okTenant + "webhooks:\n  - {name: x, preset: github, secrets: [s], signature_header: X}\n", `webhooks[0].signature_header: unknown key`},
		{"unknown tenant", okTenant + "webhooks:\n  - {name: x, preset: github, tenant: nope, secrets: [s]}\n", `unknown tenant "nope"`},
		{"tolerance past inbox_retention", okTenant + "inbox_retention: 72h\nwebhooks:\n  - {name: x, preset: mailgun, secrets: [s], tolerance: 73h}\n", `webhooks[0].tolerance: 73h is longer than inbox_retention (72h)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("cfg.yaml", []byte(tc.yaml), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "[s]") {
				t.Fatal("a secret is quoted in the error")
			}
		})
	}
}
