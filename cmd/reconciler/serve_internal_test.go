package main

import (
	"log/slog"
	"strings"
	"testing"
)

// TestStripeMetadataKey: the resolver searches Stripe by the metadata key
// the endpoints share (a configured one, not only the default), and by the
// default when they disagree.
func TestStripeMetadataKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
		want string
	}{
		{"no endpoint: the resolver's default", nil, ""},
		{"one configured key", []string{"order_ref"}, "order_ref"},
		{"two endpoints, one key", []string{"order_ref", "order_ref"}, "order_ref"},
		{"keys that disagree: the default", []string{"order_ref", "metadata_local_id"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Main{Logger: slog.New(slog.DiscardHandler)}
			for _, k := range tc.keys {
				m.Config.Stripe.Endpoints = append(m.Config.Stripe.Endpoints, StripeEndpoint{MetadataKey: k})
			}
			if got := m.stripeMetadataKey(); got != tc.want {
				t.Fatalf("stripeMetadataKey = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestIgnoredTokenWarning: RECONCILER_TOKEN is said to be ignored only when
// the config file's tenants do not use it (the README's example config
// names it as ${RECONCILER_TOKEN}).
func TestIgnoredTokenWarning(t *testing.T) {
	const envTok = "tok-from-the-environment-0123456789"
	for _, tc := range []struct {
		name     string
		fileTok  string
		wantWarn bool
	}{
		{"the file uses it", envTok, false},
		{"the file names another token", "tok-in-the-file-only-0123456789ab", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			m := &Main{
				Config: Default(),
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Getenv: func(k string) string {
					switch k {
					case envToken:
						return envTok
					case envAdminToken:
						return "admin-token-from-the-environment-0123"
					}
					return ""
				},
			}
			m.Config.Data = t.TempDir()
			m.Config.Tenants = []Tenant{{ID: "acme", Tokens: []string{tc.fileTok}}}
			if err := m.ensureTokens(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "RECONCILER_TOKEN is ignored"); got != tc.wantWarn {
				t.Fatalf("warned %v, want %v:\n%s", got, tc.wantWarn, logs.String())
			}
		})
	}
}
