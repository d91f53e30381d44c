package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
)

// TestE2EProfiledVendor drives the real program with a `vendors:` entry
// on the resend preset, pointed at a fake Resend: the claim answers the
// row's vendor_key, the runtime's call commits but its answer is lost,
// and serve's resolver replays the stored request with the same
// Idempotency-Key: the row succeeds with the first email's id, and Resend
// sent one email. A square entry shows a 64-hex key cut to 45 characters.
func TestE2EProfiledVendor(t *testing.T) {
	var mu sync.Mutex
	keys := map[string]string{} // Idempotency-Key → email id
	sends := 0
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method != "POST" || r.URL.Path != "/emails" || r.Header.Get("Authorization") != "Bearer re_e2e_key" {
			w.WriteHeader(404)
			return
		}
		k := r.Header.Get("Idempotency-Key")
		id, ok := keys[k]
		if !ok {
			sends++
			id = fmt.Sprintf("em_%d", sends)
			keys[k] = id
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q}`, id)
	}))
	t.Cleanup(fake.Close)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "reconciler.yaml")
	yaml := fmt.Sprintf(`tenants:
  - id: default
    tokens: ["${E2E_TOKEN}"]
admin_tokens: ["${E2E_ADMIN}"]
resolver: {interval: 200ms, grace: 10ms}
vendors:
  - {name: resend, preset: resend, api_base: %q, api_key: "${E2E_RESEND_KEY}"}
  - {name: square, preset: square, api_key: sq-key, api_base: %q}
`, fake.URL, fake.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"E2E_TOKEN": e2eToken, "E2E_ADMIN": e2eAdmin, "E2E_RESEND_KEY": "re_e2e_key"}
	m := startMain(t, env, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	sq := `{"run_id":"run_sq","tool":"square.pay","vendor":"square","tool_class":"write_idempotent","intent":{"amount":100}}`
	code, body := call(t, addr, e2eToken, "POST", "/v1/claims", sq)
	if vk := rowField(t, body, "vendor_key"); code != http.StatusCreated || len(vk) != 45 || len(rowField(t, body, "key")) != 64 {
		t.Fatalf("square claim %d: vendor_key %q", code, vk)
	}

	const email = `{\"from\":\"a@example.com\",\"to\":[\"b@example.com\"],\"subject\":\"hi\"}`
	claim := `{"run_id":"run_re","tool":"email.send","vendor":"resend","tool_class":"write_idempotent","intent":{"to":"b@example.com"},` +
		`"request":{"method":"POST","path":"/emails","content_type":"application/json","body":"` + email + `"}}`
	code, body = call(t, addr, e2eToken, "POST", "/v1/claims", claim)
	if code != http.StatusCreated {
		t.Fatalf("resend claim = %d %v", code, body)
	}
	key, vk := rowField(t, body, "key"), rowField(t, body, "vendor_key")
	if vk != key {
		t.Fatalf("resend vendor_key %q, want the key (it fits 256)", vk)
	}
	// The runtime's call: Resend commits; the answer is lost.
	req, _ := http.NewRequest("POST", fake.URL+"/emails", strings.NewReader(`{"from":"a@example.com","to":["b@example.com"],"subject":"hi"}`))
	req.Header.Set("Authorization", "Bearer re_e2e_key")
	req.Header.Set("Idempotency-Key", vk)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, body = call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome = %d %v", code, body)
	}
	defer func() {
		if t.Failed() {
			t.Log(m.stderr.String())
		}
	}()
	testkit.EventuallyWithin(t, 10*time.Second, "the resolver settles the row through a replay", func() bool {
		_, body := call(t, addr, e2eToken, "GET", "/v1/claims/"+key, "")
		return rowField(t, body, "status") == "succeeded"
	})
	_, body = call(t, addr, e2eToken, "GET", "/v1/claims/"+key, "")
	mu.Lock()
	defer mu.Unlock()
	if got := rowField(t, body, "upstream_receipt_id"); got != "em_1" || sends != 1 {
		t.Errorf("receipt %q, emails sent %d: want em_1, one", got, sends)
	}
	if strings.Contains(m.stderr.String(), "re_e2e_key") {
		t.Error("the log holds the Resend API key")
	}
}
