package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/fixtures"
)

const e2eStripeSecret = "whsec_e2e_0123456789abcdef"

// writeStripeConfig writes, in dir, the config of a node with the default
// tenant, an admin token and a Stripe endpoint; the secrets come from the
// environment (E2E_TOKEN, E2E_ADMIN, E2E_STRIPE_SECRET).
func writeStripeConfig(t *testing.T, dir string) string {
	t.Helper()
	cfg := filepath.Join(dir, "reconciler.yaml")
	yaml := `tenants:
  - id: default
    tokens: ["${E2E_TOKEN}"]
admin_tokens: ["${E2E_ADMIN}"]
stripe:
  endpoints:
    - name: default
      tenant: default
      secrets: ["${E2E_STRIPE_SECRET}"]
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestE2EStripeWebhook drives the real program: claim → the call times out
// (unknown) → Stripe's signed webhook with our local id → the row succeeds
// with the receipt id, once, however often and however concurrently Stripe
// delivers, and exactly one succeeded event reaches NATS.
func TestE2EStripeWebhook(t *testing.T) {
	dir := t.TempDir()
	cfg := writeStripeConfig(t, dir)
	env := map[string]string{"E2E_TOKEN": e2eToken, "E2E_ADMIN": e2eAdmin, "E2E_STRIPE_SECRET": e2eStripeSecret}
	m := startMain(t, env, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	code, body := call(t, addr, e2eToken, "POST", "/v1/claims", e2eClaim)
	if code != http.StatusCreated {
		t.Fatalf("claim = %d %v", code, body)
	}
	key, localID := rowField(t, body, "key"), rowField(t, body, "metadata_local_id")
	if code, body = call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome = %d %v", code, body)
	}

	payload, err := fixtures.Set(fixtures.Load("stripe/2024-06-20/payment_intent.succeeded"), "metadata_local_id", localID)
	if err != nil {
		t.Fatal(err)
	}
	deliver := func() int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/stripe", bytes.NewReader(payload))
		req.Header.Set("Stripe-Signature", fixtures.SignStripe(payload, time.Now(), e2eStripeSecret))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// A forged delivery is refused and changes nothing.
	forged, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/stripe", bytes.NewReader(payload))
	forged.Header.Set("Stripe-Signature", fixtures.SignStripe(payload, time.Now(), "whsec_not_ours"))
	if resp, err := http.DefaultClient.Do(forged); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("forged delivery = %v %v, want 400", resp, err)
	}
	if _, body := call(t, addr, e2eToken, "GET", "/v1/claims/"+key, ""); rowField(t, body, "status") != "unknown" {
		t.Fatalf("after a forged delivery the row is %v", body)
	}

	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := deliver(); code != http.StatusOK {
				t.Errorf("delivery = %d, want 200", code)
			}
		}()
	}
	wg.Wait()

	_, body = call(t, addr, e2eToken, "GET", "/v1/claims/"+key, "")
	if rowField(t, body, "status") != "succeeded" || rowField(t, body, "upstream_receipt_id") != "pi_3PWcJ2LkdIwHu7ix0Yt6ZHxR" {
		t.Fatalf("row after the webhook = %v", body)
	}
	_, js, err := events.Connect(m.NATSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSubjects(t, js, "recon.default.run_e2e.>", map[string]uint64{
		"recon.default.run_e2e.unknown":   1,
		"recon.default.run_e2e.succeeded": 1,
	})
	checkMsgID(t, js, "recon.default.run_e2e.succeeded", "default:"+key+":succeeded")
}
