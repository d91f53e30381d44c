package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

const e2eTool = `{"vendor": "stripe", "class": "write_idempotent", "side_effect": "charge",
	"key_placement": {"header": "Idempotency-Key"}, "autonomy": "autonomous",
	"checklist": {"side_effect_documented": true, "key_born_in_runtime": true, "ledger_or_unique_field": true,
		"timeout_leaves_unknown": true, "error_classes_mapped": true, "duplicate_delivery_test": true, "checked_by": "alice"}}`

// TestE2ERegistrySurvivesRestart registers a tool, restarts the program on
// the same data directory and finds the entry, and its effect on claims,
// still there.
func TestE2ERegistrySurvivesRestart(t *testing.T) {
	data := t.TempDir()
	m := startMain(t, e2eEnv, "serve", "--data", data, "--http", "127.0.0.1:0")
	code, body := call(t, m.HTTPAddr(), e2eToken, http.MethodPut, "/v1/tools/stripe.payment_intents.create", e2eTool)
	if code != http.StatusCreated {
		t.Fatalf("PUT: %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	m = startMain(t, e2eEnv, "serve", "--data", data, "--http", "127.0.0.1:0")
	code, body = call(t, m.HTTPAddr(), e2eToken, http.MethodGet, "/v1/tools/stripe.payment_intents.create", "")
	tool, _ := body["tool"].(map[string]any)
	if code != http.StatusOK || tool["version"] != float64(1) || tool["vendor"] != "stripe" {
		t.Fatalf("GET after restart: %d %v", code, body)
	}
	claim := `{"run_id": "run_1", "tool": "stripe.payment_intents.create", "vendor": "paypal", "tool_class": "write_idempotent", "intent": {"amount": 1}}`
	if code, body := call(t, m.HTTPAddr(), e2eToken, http.MethodPost, "/v1/claims", claim); code != http.StatusUnprocessableEntity {
		t.Fatalf("a mismatched claim after restart: %d %v, want 422 tool_mismatch", code, body)
	}
}
