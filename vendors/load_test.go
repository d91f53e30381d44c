package vendors_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/vendors"
	"github.com/agentledger/reconciler/vendors/presets"
)

func env(m map[string]string) vendors.Options {
	return vendors.Options{Expand: func(s string) (string, error) {
		for k, v := range m {
			s = strings.ReplaceAll(s, "${"+k+"}", v)
		}
		if strings.Contains(s, "${") {
			return "", fmt.Errorf("unset variable")
		}
		return s, nil
	}}
}

func parse(t *testing.T, doc string) ([]vendors.Profile, error) {
	t.Helper()
	return vendors.Parse("reconciler.yaml", []byte(doc), env(map[string]string{"RESEND_API_KEY": "re_secret_123", "TOKEN": "tok_secret_456"}))
}

func TestPresetMergeKeyByKey(t *testing.T) {
	ps, err := parse(t, `
vendors:
  - name: mail
    preset: postmark
    api_key: ${RESEND_API_KEY}
    lookup: {min_age: 1s, status_map: {Bounced: failed}}
`)
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	l := p.Lookup
	if got, want := l.MinAge, time.Second; got != want {
		t.Errorf("min_age = %v, want %v", got, want)
	}
	// Everything else of the preset's lookup block stays.
	if !strings.Contains(l.URL, "metadata_local_id={local_id}") || l.ResultsPath != "Messages" || l.Retention != 1080*time.Hour {
		t.Errorf("lookup lost the preset's keys: %+v", *l)
	}
	if got := l.StatusMap; got["Bounced"] != "failed" || got["Sent"] != "succeeded" {
		t.Errorf("status_map = %v, want the preset's plus Bounced", got)
	}
	if name, value := p.AuthHeader(); name != "X-Postmark-Server-Token" || value != "re_secret_123" {
		t.Errorf("auth = %s: %q", name, value)
	}
	if p.Idempotency.Kind() != vendors.PlaceNone || p.EffectiveWindow() != 0 {
		t.Errorf("postmark placement %s window %v", p.Idempotency, p.EffectiveWindow())
	}
}

func TestPresetBlockReplacedOrRemoved(t *testing.T) {
	ps, err := parse(t, `
vendors:
  - name: square
    preset: square
    api_key: x
    idempotency: {header: Idempotency-Key}
    replay_outcomes: []
    retrieve: null
`)
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if p.Idempotency.Kind() != vendors.PlaceHeader || p.Idempotency.Body != "" {
		t.Errorf("idempotency = %+v, want the entry's block alone", p.Idempotency)
	}
	if p.Retrieve != nil || len(p.ReplayOutcomes) != 0 {
		t.Errorf("retrieve %v, outcomes %v: want both removed", p.Retrieve, p.ReplayOutcomes)
	}
	if p.MaxKeyLen != 45 {
		t.Errorf("max_key_len = %d, want the preset's 45", p.MaxKeyLen)
	}
}

func TestCustomVendorDefaults(t *testing.T) {
	ps, err := parse(t, `
vendors:
  - name: acme-crm
    api_base: https://crm.example.com
    auth: {header: Authorization, value: "Bearer ${TOKEN}"}
    lookup:
      url: /notes?ref={local_id}
      results_path: data
      found_id_path: id
`)
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if p.ReplayWindow != 0 || p.CanReplay() || p.EffectiveWindow() != 0 {
		t.Errorf("custom vendor window %v: want 0, never replay", p.ReplayWindow)
	}
	if p.Lookup.Method != "GET" || p.MaxKeyLen != 255 || p.KeyFormat != vendors.FormatPrintable {
		t.Errorf("defaults: %+v", p)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want []string // each must appear in the error
	}{
		{"unknown key", "vendors:\n  - name: x\n    replay_windw: 1h\n", []string{"reconciler.yaml:3", "vendors[0].replay_windw", "unknown key"}},
		{"lookup url without local id", "vendors:\n  - name: x\n    api_base: https://x.example\n    lookup:\n      url: /things\n      results_path: items\n",
			[]string{"reconciler.yaml:5", "vendors[0].lookup.url", "{local_id}"}},
		{"found_id_path without results_path", "vendors:\n  - name: x\n    api_base: https://x.example\n    lookup:\n      url: /t?q={local_id}\n      found_id_path: id\n",
			[]string{"reconciler.yaml:6", "vendors[0].lookup.found_id_path", "without results_path"}},
		{"window without placement", "vendors:\n  - name: x\n    replay_window: 24h\n", []string{"reconciler.yaml:3", "vendors[0].replay_window", "placement"}},
		{"window with none", "vendors:\n  - name: x\n    idempotency: {none: true}\n    replay_window: 1h\n", []string{"reconciler.yaml:4", "replay_window"}},
		{"preset that does not exist", "vendors:\n  - name: x\n    preset: mailchimp\n", []string{"reconciler.yaml:3", "vendors[0].preset", `no preset "mailchimp"`}},
		{"api_key without preset", "vendors:\n  - name: x\n    api_key: sk_live_very_secret\n", []string{"reconciler.yaml:3", "vendors[0].api_key", "needs a preset"}},
		{"preset needs api_base", "vendors:\n  - name: zd\n    preset: zendesk\n    api_key: k\n", []string{"vendors[0].lookup", "needs api_base"}},
		{"two placements", "vendors:\n  - name: x\n    idempotency: {header: K, body: k}\n", []string{"reconciler.yaml:3", "exactly one"}},
		{"short key", "vendors:\n  - name: x\n    idempotency: {header: K}\n    max_key_len: 20\n", []string{"reconciler.yaml:4", "max_key_len"}},
		{"bad status", "vendors:\n  - name: x\n    api_base: https://x.example\n    retrieve:\n      url: /o/{receipt_id}\n      status_path: s\n      status_map: {done: finished}\n", []string{"reconciler.yaml:7", "retrieve.status_map.done"}},
		{"bad rate", "vendors:\n  - name: x\n    rate_limit: fast\n", []string{"reconciler.yaml:3", "rate_limit", "invalid rate"}},
		{"named twice", "vendors:\n  - name: x\n  - name: x\n", []string{"reconciler.yaml:3", "named twice"}},
		{"bad name", "vendors:\n  - name: Resend\n", []string{"reconciler.yaml:2", "vendors[0].name"}},
		{"preset key overridden badly", "vendors:\n  - name: r\n    preset: resend\n    api_key: k\n    lookup: {min_age: 1m}\n", []string{"reconciler.yaml:5", "vendors[0].lookup"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.doc)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "very_secret") {
				t.Errorf("error quotes a secret: %q", err)
			}
		})
	}
}

func TestRedacted(t *testing.T) {
	ps, err := parse(t, `
vendors:
  - name: resend
    preset: resend
    api_key: ${RESEND_API_KEY}
  - name: custom
    api_base: https://user:pw_secret_789@x.example
    auth: {header: Authorization, value: "Bearer ${TOKEN}"}
`)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	for _, p := range ps {
		log.Info("profile", "vendor", p)
		out := fmt.Sprintf("%v %+v %#v %s", p, p, p, buf.String()) + fmt.Sprintf("%+v", p.Redacted())
		for _, secret := range []string{"re_secret_123", "tok_secret_456", "pw_secret_789"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s leaks %s: %s", p.Name, secret, out)
			}
		}
	}
	if r := ps[0].Redacted(); r.APIKey != vendors.Redacted || r.Auth.Value != "Bearer {api_key}" {
		t.Errorf("redacted resend: %q %q", r.APIKey, r.Auth.Value)
	}
}

// Every shipped preset loads as an entry that names it (with the keys the
// preset leaves to the operator), and says what the README's table says.
func TestShippedPresets(t *testing.T) {
	want := map[string]struct {
		place  string
		window string
		lookup bool
	}{
		"resend":   {"header Idempotency-Key", "24h", false},
		"postmark": {"none", "0", true},
		"zendesk":  {"header Idempotency-Key", "2h", true},
		"hubspot":  {"none", "0", true},
		"linear":   {"client_id variables.input.id", "forever", true},
		"adyen":    {"header Idempotency-Key", "744h", false},
		"square":   {"body idempotency_key", "24h", false},
		"mailgun":  {"none", "0", true},
	}
	names := presets.Names()
	if len(names) != len(want) {
		t.Errorf("presets %v, want %d", names, len(want))
	}
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			doc := fmt.Sprintf("vendors:\n  - name: %s\n    preset: %s\n    api_key: k\n    api_base: https://%s.example\n", n, n, n)
			ps, err := parse(t, doc)
			if err != nil {
				t.Fatal(err)
			}
			p, w := ps[0], want[n]
			if got := p.Idempotency.String(); got != w.place {
				t.Errorf("placement %q, want %q", got, w.place)
			}
			if got := p.ReplayWindow.String(); got != w.window {
				t.Errorf("window %q, want %q", got, w.window)
			}
			if got := p.Lookup != nil; got != w.lookup {
				t.Errorf("lookup %v, want %v", got, w.lookup)
			}
		})
	}
}

func TestVendorKey(t *testing.T) {
	minted := strings.Repeat("a1", 32) // a 64-hex minted key
	cases := []struct {
		name   string
		key    string
		max    int
		format vendors.KeyFormat
		check  func(string) bool
	}{
		{"fits: unchanged", minted, 256, "", func(s string) bool { return s == minted }},
		{"business key fits", "order-42/refund", 64, "", func(s string) bool { return s == "order-42/refund" }},
		{"square 45", minted, 45, "", func(s string) bool { return len(s) == 45 && s != minted[:45] }},
		{"token alphabet", "order 42/x", 255, vendors.FormatToken, func(s string) bool { return len(s) == 64 && !strings.ContainsAny(s, " /") }},
		{"uuid4", minted, 0, vendors.FormatUUID4, func(s string) bool {
			return len(s) == 36 && s[14] == '4' && strings.ContainsRune("89ab", rune(s[19]))
		}},
		{"uuid4 kept", "0f8fad5b-d9cb-469f-a165-70867728950e", 0, vendors.FormatUUID4, func(s string) bool { return s == "0f8fad5b-d9cb-469f-a165-70867728950e" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := vendors.DeriveKey(tc.key, tc.max, tc.format)
			if !tc.check(got) {
				t.Errorf("DeriveKey(%q, %d, %q) = %q", tc.key, tc.max, tc.format, got)
			}
			if again := vendors.DeriveKey(tc.key, tc.max, tc.format); again != got {
				t.Errorf("not deterministic: %q then %q", got, again)
			}
			if other := vendors.DeriveKey(tc.key+"x", tc.max, tc.format); other == got {
				t.Errorf("two keys derive one vendor key %q", got)
			}
		})
	}
}

// The contract example, as written (a preset, its api_key and an
// auth of the entry's own), loads.
func TestContractExample(t *testing.T) {
	ps, err := parse(t, `
vendors:
  - name: resend
    preset: resend
    api_base: https://api.resend.com
    api_key: ${RESEND_API_KEY}
    auth: {header: Authorization, value: "Bearer ${RESEND_API_KEY}"}
    idempotency: {header: Idempotency-Key}
    max_key_len: 256
    replay_window: 24h
    receipt_path: id
    replay_outcomes:
      - {status: 409, body_contains: invalid_idempotent_request, then: page}
      - {status: 409, body_contains: concurrent_idempotent_requests, then: retry}
    lookup:
      method: GET
      url: /messages/outbound?count=2&offset=0&metadata_local_id={local_id}
      body: ""
      results_path: Messages
      found_id_path: MessageID
      status_path: Status
      status_map: {Sent: succeeded, Queued: pending}
      min_age: 5m
      retention: 1080h
    retrieve:
      url: /emails/{receipt_id}
      status_path: last_event
      status_map: {delivered: succeeded, sent: succeeded, bounced: failed}
    rate_limit: 10/s
`)
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if name, v := p.AuthHeader(); name != "Authorization" || v != "Bearer re_secret_123" {
		t.Errorf("auth %s %q", name, v)
	}
	if p.RateLimit.PerSecond() != 10 || p.Lookup.MinAge != 5*time.Minute || p.Retrieve.StatusMap["bounced"] != "failed" {
		t.Errorf("profile %+v", p)
	}
}

func TestAuthBase64(t *testing.T) {
	p := vendors.Profile{APIKey: "key-3ax6", Auth: &vendors.Auth{Header: "Authorization", Value: "Basic {base64:api:{api_key}}"}}
	name, value := p.AuthHeader()
	// base64("api:key-3ax6"), as curl --user api:key-3ax6 sends it.
	if name != "Authorization" || value != "Basic YXBpOmtleS0zYXg2" {
		t.Errorf("got %s: %s", name, value)
	}
}
