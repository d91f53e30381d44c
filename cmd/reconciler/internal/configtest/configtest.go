package configtest

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fullEnv holds the variables internal/config/testdata/full.yaml
// references. The "SeKrEt" marker lets tests assert that no secret value
// reaches a message or the log.
var fullEnv = map[string]string{
	"ACME_TOKEN":             "acme-SeKrEt-token-0001",
	"RECONCILER_ADMIN_TOKEN": "admin-SeKrEt-token-0002",
	"STRIPE_API_KEY":         "sk_test_SeKrEt_0003",
	"STRIPE_WEBHOOK_SECRET":  "whsec_SeKrEt_0004",
	"PAYPAL_CLIENT_SECRET":   "paypal-SeKrEt-0005",
	"RESEND_WEBHOOK_SECRET":  "whsec_U2VLckV0LTAwMDY=", // base64 of "SeKrEt-0006"
	"PD_ROUTING_KEY":         "pd-SeKrEt-0007",
	"SLACK_HOOK_SECRET":      "SeKrEt0008",
	"ACME_APPROVER_TOKEN":    "approver-SeKrEt-token-0009",
	"SQUARE_SIGNATURE_KEY":   "square-SeKrEt-0010",
	"RESEND_API_KEY":         "re_SeKrEt_0013",
	"POSTMARK_SERVER_TOKEN":  "pm-SeKrEt-0011",
	"CRM_TOKEN":              "crm-SeKrEt-0012",
	"CONSOLE_SESSION_KEY":    "console-SeKrEt-session-key-0014-0123456789",
}

// FullEnv returns a copy of the variables internal/config/testdata/full.yaml
// references.
func FullEnv() map[string]string { return maps.Clone(fullEnv) }

// MapEnv is an injected environment: a Getenv over m.
func MapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// WriteFile writes data to name in a fresh temporary directory and
// returns its path.
func WriteFile(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// ReadToken returns the token stored at path, without its newline.
func ReadToken(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
