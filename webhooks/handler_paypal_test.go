package webhooks_test

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/webhooks"
)

const payPalHookID = "WH-HANDLER-TEST"

// payPalPKI serves the test certificate chain of fixtures/paypal over TLS
// and returns the endpoint trusting it, the leaf's key and the cert URL.
// up switches the server between serving and failing (503).
func payPalPKI(t *testing.T) (webhooks.PayPalEndpoint, webhooks.PayPalOptions, *rsa.PrivateKey, string, *atomic.Bool) {
	t.Helper()
	dir := filepath.Join("..", "fixtures", "paypal", "certs")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	chain, root := read("leaf-chain.pem"), read("root.pem")
	block, _ := pem.Decode(read("leaf.key"))
	if block == nil {
		t.Fatal("leaf.key: no PEM")
	}
	var key *rsa.PrivateKey
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		key = k
	} else {
		k8, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		key = k8.(*rsa.PrivateKey)
	}
	up := &atomic.Bool{}
	up.Store(true)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(chain)
	}))
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	roots.AppendCertsFromPEM(root)
	ep := webhooks.PayPalEndpoint{
		Name: "default", Tenant: "acme", WebhookID: payPalHookID,
		CertURLPrefixes: []string{srv.URL + "/"}, CertCNSuffix: ".test.paypal.example", RootCAs: roots,
	}
	return ep, webhooks.PayPalOptions{HTTPClient: srv.Client()}, key, srv.URL + "/v1/notifications/certs/CERT-handler-test", up
}

func TestPayPalDelivery(t *testing.T) {
	ep, ppOpts, key, certURL, up := payPalPKI(t)
	o := defaultOptions()
	o.PayPal, o.PayPalOptions = []webhooks.PayPalEndpoint{ep}, ppOpts
	hs := newHarness(t, o)
	// The test certificates are valid from when they were generated.
	now := time.Now().Truncate(time.Second)
	hs.setNow(now)
	row := hs.claim("acme", "run-1", nil)

	sign := func(name, tid string, at time.Time) ([]byte, http.Header) {
		body, err := fixtures.Set(fixtures.Load(name), "metadata_local_id", row.MetadataLocalID)
		if err != nil {
			t.Fatal(err)
		}
		h, err := fixtures.SignPayPal(key, certURL, payPalHookID, tid, at, body)
		if err != nil {
			t.Fatal(err)
		}
		return body, h
	}

	t.Run("certificate host down", func(t *testing.T) {
		up.Store(false)
		defer up.Store(true)
		body, h := sign("paypal/payment_capture_completed", "tid-down", now)
		rec := hs.post("/webhooks/paypal", body, h)
		if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "unavailable" {
			t.Fatalf("got %d %s, want 503 so PayPal retries", rec.Code, rec.Body)
		}
		if got := hs.row(row).Status; got != ledger.StatusPending {
			t.Fatalf("row = %s", got)
		}
	})
	t.Run("tampered", func(t *testing.T) {
		body, h := sign("paypal/payment_capture_completed", "tid-bad", now)
		body = append(body, ' ')
		rec := hs.post("/webhooks/paypal/default", body, h)
		if rec.Code != http.StatusBadRequest || errorCode(t, rec) != "bad_signature" {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
	})
	t.Run("future", func(t *testing.T) {
		body, h := sign("paypal/payment_capture_completed", "tid-future", now.Add(time.Hour))
		rec := hs.post("/webhooks/paypal", body, h)
		if rec.Code != http.StatusBadRequest || errorCode(t, rec) != "stale" {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
	})
	t.Run("completed", func(t *testing.T) {
		body, h := sign("paypal/payment_capture_completed", "tid-ok", now)
		rec := hs.post("/webhooks/paypal", body, h)
		if rec.Code != http.StatusOK || result(t, rec) != "accepted" {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
		got := hs.row(row)
		if got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID == "" {
			t.Fatalf("row = %s %q", got.Status, got.UpstreamReceiptID)
		}
		if c := hs.counter("reconciler_webhooks_total", "vendor", "paypal", "result", "accepted"); c != 1 {
			t.Errorf("accepted{paypal} = %v", c)
		}
		// PayPal re-sends the same event id with a new transmission: a duplicate.
		body, h = sign("paypal/payment_capture_completed", "tid-retry", now)
		rec = hs.post("/webhooks/paypal", body, h)
		if rec.Code != http.StatusOK || result(t, rec) != "duplicate" {
			t.Fatalf("retry: %d %s", rec.Code, rec.Body)
		}
		if n := len(hs.outbox()); n != 1 {
			t.Errorf("outbox holds %d records, want 1", n)
		}
	})
}
