package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/webhooks"
)

// TestE2ESquarePresetWebhook drives the real program with a webhooks: entry
// (preset square): claim → timeout (unknown) → Square's signed delivery,
// keyed over the configured url, joins by reference_id and closes the row
// once; a redelivery is 200 and publishes nothing more.
func TestE2ESquarePresetWebhook(t *testing.T) {
	const squareKey, hookURL = "e2e-square-signature-key", "https://hooks.example.com/webhooks/square/sq"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "reconciler.yaml")
	yaml := `tenants:
  - id: default
    tokens: ["${E2E_TOKEN}"]
admin_tokens: ["${E2E_ADMIN}"]
webhooks:
  - name: sq
    preset: square
    secrets: ["old-square-key", "${E2E_SQUARE_KEY}"]
    url: ` + hookURL + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"E2E_TOKEN": e2eToken, "E2E_ADMIN": e2eAdmin, "E2E_SQUARE_KEY": squareKey}
	m := startMain(t, env, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	claim := `{"run_id":"run_sq","tool":"square.payments.create","tool_call_id":"call_1","vendor":"square","tool_class":"write_idempotent","intent":{"amount_money":{"amount":1050,"currency":"USD"}}}`
	code, body := call(t, addr, e2eToken, "POST", "/v1/claims", claim)
	if code != http.StatusCreated {
		t.Fatalf("claim = %d %v", code, body)
	}
	key, localID := rowField(t, body, "key"), rowField(t, body, "metadata_local_id")
	if code, body = call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome = %d %v", code, body)
	}
	payload := fmt.Sprintf(`{"merchant_id":"M1","type":"payment.updated","event_id":"6a8f5f28-54a1-4eb0-a98a-3111513fd4fc","created_at":"2026-03-01T12:00:00Z",`+
		`"data":{"type":"payment","id":"KkAkhdMsgzn59SM8A89WgKwekxLZY","object":{"payment":{"id":"KkAkhdMsgzn59SM8A89WgKwekxLZY","status":"COMPLETED","reference_id":%q}}}}`, localID)
	deliver := func(key string) int {
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write([]byte(hookURL + payload))
		req, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/square/sq", bytes.NewReader([]byte(payload)))
		req.Header.Set("X-Square-Hmacsha256-Signature", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := deliver("not-the-key"); got != http.StatusBadRequest {
		t.Fatalf("forged delivery = %d, want 400", got)
	}
	for i := range 2 {
		if got := deliver(squareKey); got != http.StatusOK {
			t.Fatalf("delivery %d = %d, want 200", i, got)
		}
	}
	_, body = call(t, addr, e2eToken, "GET", "/v1/claims/"+key, "")
	if rowField(t, body, "status") != "succeeded" || rowField(t, body, "upstream_receipt_id") != "KkAkhdMsgzn59SM8A89WgKwekxLZY" {
		t.Fatalf("row after the webhook = %v", body)
	}
	_, js, err := events.Connect(m.NATSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSubjects(t, js, "recon.default.run_sq.>", map[string]uint64{
		"recon.default.run_sq.unknown":   1,
		"recon.default.run_sq.succeeded": 1,
	})
}

// TestArchitectureWebhooksBuild: the webhooks: entries of the example in
// docs/architecture.md §9 (a preset and a custom endpoint from knobs alone)
// build into the handler serve runs.
func TestArchitectureWebhooksBuild(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(doc), "<!-- config-example:begin -->\n```yaml\n")
	block, _, _ = strings.Cut(block, "```\n<!-- config-example:end -->")
	c, err := config.Parse("docs/architecture.md", []byte(block), configtest.MapEnv(configtest.FullEnv()))
	if err != nil {
		t.Fatal(err)
	}
	o, err := webhookOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Presets) != 2 {
		t.Fatalf("%d preset endpoints, want the example's 2", len(o.Presets))
	}
	o.Store = memstore.New(ledger.DefaultPolicy())
	o.PayPal = nil // its CA file is the example's, not this machine's
	h, err := webhooks.New(o)
	if err != nil {
		t.Fatalf("webhooks.New from the example: %v", err)
	}
	h.Close()
}
