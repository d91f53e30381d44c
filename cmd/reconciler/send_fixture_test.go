package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/webhooks"
)

const (
	sfStripeSecret = "whsec_send_fixture_test"
	sfResendSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sfPayPalHook   = "WH-SENDFIXTURE-TEST"
)

// sendFixtureServer runs the real webhook handlers on a memstore behind
// httptest, with a Stripe, a Resend and (when the test PKI is present) a
// PayPal endpoint whose certificate is served over TLS.
func sendFixtureServer(t *testing.T, now time.Time) (*httptest.Server, *memstore.Store, string) {
	t.Helper()
	st := memstore.New(ledger.DefaultPolicy())
	t.Cleanup(func() { _ = st.Close() })

	pkiDir := filepath.Join("..", "..", "fixtures", "paypal", "certs")
	chain, err := os.ReadFile(filepath.Join(pkiDir, "leaf-chain.pem"))
	if err != nil {
		t.Fatalf("paypal test pki: %v", err)
	}
	root, err := os.ReadFile(filepath.Join(pkiDir, "root.pem"))
	if err != nil {
		t.Fatal(err)
	}
	certSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(chain)
	}))
	t.Cleanup(certSrv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(certSrv.Certificate())
	if !roots.AppendCertsFromPEM(root) {
		t.Fatal("root.pem")
	}

	h, err := webhooks.New(webhooks.Options{
		Store:    st,
		Stripe:   []webhooks.StripeEndpoint{{Name: "default", Tenant: "acme", Secrets: []string{sfStripeSecret}}},
		Standard: []webhooks.StandardEndpoint{{Name: "resend", Tenant: "acme", Secrets: []string{sfResendSecret}, Vendor: "resend"}},
		PayPal: []webhooks.PayPalEndpoint{{
			Name: "default", Tenant: "acme", WebhookID: sfPayPalHook,
			CertURLPrefixes: []string{certSrv.URL + "/"}, CertCNSuffix: ".test.paypal.example", RootCAs: roots,
		}},
		PayPalOptions: webhooks.PayPalOptions{HTTPClient: certSrv.Client()},
		Registerer:    prometheus.NewRegistry(),
		Now:           func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	e := echo.New()
	h.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, st, certSrv.URL + "/v1/notifications/certs/CERT-360caa42-fca2a594-test"
}

func TestSendFixture(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	srv, st, certURL := sendFixtureServer(t, now)
	ctx := context.Background()
	keyFile := filepath.Join("..", "..", "fixtures", "paypal", "certs", "leaf.key")

	tests := []struct {
		name       string
		args       func(lid string) []string
		wantCode   int
		wantOut    string
		wantStatus ledger.Status // of the claimed row afterwards
		wantErr    string        // on stderr: which usage error it was
	}{
		{"stripe", func(lid string) []string {
			return []string{"stripe/2024-06-20/payment_intent.succeeded", "--url", srv.URL + "/webhooks/stripe", "--secret", sfStripeSecret, "--set", "metadata_local_id=" + lid}
		}, 0, `"result":"accepted"`, ledger.StatusSucceeded, ""},
		{"stripe flags first, path set", func(lid string) []string {
			return []string{"--url", srv.URL + "/webhooks/stripe/default", "--secret", sfStripeSecret, "--set", "metadata_local_id=" + lid, "--set", "id=evt_custom", "stripe/2017-02-14/charge.succeeded"}
		}, 0, `"result":"accepted"`, ledger.StatusSucceeded, ""},
		{"resend", func(lid string) []string {
			return []string{"resend/email.sent", "--url", srv.URL + "/webhooks/standard/resend", "--secret", sfResendSecret, "--set", "metadata_local_id=" + lid}
		}, 0, `"result":"accepted"`, ledger.StatusSucceeded, ""},
		{"paypal", func(lid string) []string {
			return []string{"paypal/payment_capture_completed", "--url", srv.URL + "/webhooks/paypal", "--set", "metadata_local_id=" + lid,
				"--paypal-key", keyFile, "--paypal-cert-url", certURL, "--paypal-webhook-id", sfPayPalHook}
		}, 0, `"result":"accepted"`, ledger.StatusSucceeded, ""},
		{"wrong secret", func(lid string) []string {
			return []string{"stripe/2024-06-20/payment_intent.succeeded", "--url", srv.URL + "/webhooks/stripe", "--secret", "whsec_wrong", "--set", "metadata_local_id=" + lid}
		}, 1, "400 Bad Request", ledger.StatusPending, ""},
		{"stale", func(lid string) []string {
			return []string{"stripe/2024-06-20/payment_intent.succeeded", "--url", srv.URL + "/webhooks/stripe", "--secret", sfStripeSecret, "--set", "metadata_local_id=" + lid, "--at", "1700000000"}
		}, 1, `"code":"stale"`, ledger.StatusPending, ""},
		{"unknown fixture", func(string) []string {
			return []string{"stripe/nope", "--url", srv.URL, "--secret", "s"}
		}, 2, "", ledger.StatusPending, "no such payload"},
		{"no url", func(string) []string { return []string{"resend/email.sent", "--secret", "s"} }, 2, "", ledger.StatusPending, "--url is required"},
		{"no secret", func(string) []string { return []string{"resend/email.sent", "--url", srv.URL} }, 2, "", ledger.StatusPending, "--secret is required"},
		{"two names", func(string) []string { return []string{"resend/email.sent", "resend/email.sent", "--url", srv.URL} }, 2, "", ledger.StatusPending, "want exactly one fixture NAME"},
		{"bad set", func(string) []string {
			return []string{"resend/email.sent", "--url", srv.URL, "--secret", sfResendSecret, "--set", "novalue"}
		}, 2, "", ledger.StatusPending, "want PATH=VALUE"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ledger.NewClaim(ledger.ClaimRequest{
				Tenant: "acme", RunID: "run-" + string(rune('a'+i)), Tool: "charge", Vendor: "stripe",
				ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(`{"n":1}`),
			}, ledger.DefaultPolicy(), now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Claim(ctx, c); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			args := tt.args(c.Row.MetadataLocalID)
			code := sendFixtureWith(ctx, args, &stdout, &stderr, func() time.Time { return now }, nil)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tt.wantOut)
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.wantErr)
			}
			for _, a := range args {
				if strings.HasPrefix(a, "whsec_") && strings.Contains(stdout.String()+stderr.String(), a) {
					t.Errorf("output holds the secret")
				}
			}
			row, err := st.Get(ctx, "acme", c.Row.Key)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != tt.wantStatus {
				t.Errorf("row = %s, want %s", row.Status, tt.wantStatus)
			}
		})
	}
}

func TestSendFixtureList(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := sendFixture(context.Background(), []string{"--list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"stripe/2024-06-20/payment_intent.succeeded", "resend/email.sent", "paypal/payment_capture_completed"} {
		if !strings.Contains(stdout.String(), want+"\n") {
			t.Errorf("--list lacks %s", want)
		}
	}
}
