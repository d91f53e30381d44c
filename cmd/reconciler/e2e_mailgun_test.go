package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/fakemailgun"
	"github.com/agentledger/reconciler/internal/testkit"
)

// TestE2EMailgunHint drives the real program with a mailgun webhook
// endpoint and a mailgun vendor profile: a Mailgun delivery is a hint. The
// resolver runs once an hour here, so only the hint's wake can make it ask
// the (fake) Mailgun Events API; the vendor's answer, not the body, settles
// the row, and a delivery Mailgun knows nothing of settles nothing.
func TestE2EMailgunHint(t *testing.T) {
	const signingKey, apiKey = "e2e-mailgun-signing-key", "key-e2e-mailgun-api"
	mg := fakemailgun.New("mg.example.com", apiKey, time.Now)
	t.Cleanup(mg.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "reconciler.yaml")
	yaml := fmt.Sprintf(`tenants:
  - id: default
    tokens: ["${E2E_TOKEN}"]
admin_tokens: ["${E2E_ADMIN}"]
resolver: {interval: 1h}
vendors:
  - {name: mailgun, preset: mailgun, api_base: %q, api_key: "${E2E_MG_KEY}", rate_limit: 100/s}
webhooks:
  - {name: mg, preset: mailgun, secrets: ["${E2E_MG_SIGNING}"]}
`, mg.APIBase())
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"E2E_TOKEN": e2eToken, "E2E_ADMIN": e2eAdmin, "E2E_MG_KEY": apiKey, "E2E_MG_SIGNING": signingKey}
	m := startMain(t, env, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	unknownRow := func(run string) (key, localID string) {
		t.Helper()
		claim := `{"run_id":"` + run + `","tool":"email.send","vendor":"mailgun","tool_class":"write_ledger","intent":{"to":"b@example.com"}}`
		code, body := call(t, addr, e2eToken, "POST", "/v1/claims", claim)
		if code != http.StatusCreated {
			t.Fatalf("claim = %d %v", code, body)
		}
		key, localID = rowField(t, body, "key"), rowField(t, body, "metadata_local_id")
		if code, body = call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"timeout"}`); code != http.StatusOK {
			t.Fatalf("outcome = %d %v", code, body)
		}
		return key, localID
	}
	deliver := func(token, eventID, localID string) {
		t.Helper()
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(signingKey))
		mac.Write([]byte(ts + token))
		body := fmt.Sprintf(`{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":{"id":%q,"event":"delivered",`+
			`"message":{"headers":{"message-id":"forged@mg.example.com"}},"user-variables":{"metadata_local_id":%q}}}`,
			ts, token, hex.EncodeToString(mac.Sum(nil)), eventID, localID)
		resp, err := http.Post("http://"+addr+"/webhooks/mailgun/mg", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %s = %d, want 200", eventID, resp.StatusCode)
		}
	}
	status := func(key string) (string, string) {
		_, body := call(t, addr, e2eToken, "GET", "/v1/claims/"+key, "")
		return rowField(t, body, "status"), rowField(t, body, "upstream_receipt_id")
	}

	genuine, genuineLocal := unknownRow("run_genuine")
	forged, forgedLocal := unknownRow("run_forged")
	mg.Add("e2e-1@mg.example.com", genuineLocal, "accepted", "")
	deliver("tok-forged-0000000000000000000000000000000000000000", "ev-forged", forgedLocal)
	if st, _ := status(forged); st != "unknown" {
		t.Fatalf("the forged delivery made the row %s at once", st)
	}
	deliver("tok-genuine-000000000000000000000000000000000000000", "ev-genuine", genuineLocal)
	testkit.EventuallyWithin(t, 30*time.Second, "the woken resolver settles the row from Mailgun's events", func() bool {
		st, receipt := status(genuine)
		return st == "succeeded" && receipt == "e2e-1@mg.example.com"
	})
	if mg.EventCalls() == 0 {
		t.Fatal("Mailgun's Events API was never asked")
	}
	if st, _ := status(forged); st != "unknown" {
		t.Fatalf("a delivery Mailgun does not know made the row %s", st)
	}
}
