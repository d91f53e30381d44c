package presets_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// fakeAdyen is Adyen's Checkout API, replay only: POST /v71/payments takes
// Idempotency-Key (at most 64 characters) and answers a repeat with the
// first response (and the idempotency-key header echoed); an answer with
// Transient-Error: true did not consume the key. There is no GET by
// merchant reference. X-API-Key auth.
type fakeAdyen struct {
	srv       *httptest.Server
	mu        sync.Mutex
	byKey     map[string]string // key → first response body
	transient int               // the next n requests fail transiently
	result    string            // resultCode of new payments
	payments  int
}

func newFakeAdyen(t *testing.T) *fakeAdyen {
	f := &fakeAdyen{byKey: map[string]string{}, result: "Authorised"}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAdyen) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-API-Key") != apiKey {
		writeJSON(w, 401, map[string]any{"status": 401, "errorCode": "000", "message": "HTTP Status Response - Unauthorized", "errorType": "security"})
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v71/payments" {
		writeJSON(w, 404, map[string]any{"status": 404, "errorType": "validation"})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 64 {
		writeJSON(w, 422, map[string]any{"status": 422, "errorCode": "702", "message": "Idempotency key too long", "errorType": "validation"})
		return
	}
	if f.transient > 0 {
		f.transient--
		w.Header().Set("Transient-Error", "true")
		writeJSON(w, 500, map[string]any{"status": 500, "errorCode": "905", "message": "Payment details are not supported", "errorType": "configuration"})
		return
	}
	w.Header().Set("idempotency-key", key)
	if body, ok := f.byKey[key]; ok && key != "" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
		return
	}
	f.payments++
	body := fmt.Sprintf(`{"pspReference":"NC6HT9CRT65ZGN8%d","resultCode":%q,"merchantReference":"order-1"}`, f.payments, f.result)
	if key != "" {
		f.byKey[key] = body
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}

func adyenRequest() *ledger.Request {
	return &ledger.Request{Method: "POST", Path: "/payments", ContentType: "application/json",
		Body: `{"amount":{"currency":"EUR","value":1000},"reference":"order-1","merchantAccount":"Acme"}`}
}

func TestAdyen(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakeAdyen) {
		f := newFakeAdyen(t)
		return newEnv(t, newClock(), "adyen", f.srv.URL+"/v71", ""), f
	}
	t.Run("a lost answer is learnt by replaying the key: one payment", func(t *testing.T) {
		e, f := setup(t)
		req := adyenRequest()
		row := e.claim(`{"amount":1000}`, req)
		e.send(row, strings.TrimSuffix(e.profile.APIBase, "/"), req)
		e.timedOut(row)
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if got.UpstreamReceiptID != "NC6HT9CRT65ZGN81" || f.payments != 1 {
			t.Errorf("receipt %q payments %d", got.UpstreamReceiptID, f.payments)
		}
	})
	t.Run("Transient-Error: the key was not consumed, replay again later", func(t *testing.T) {
		e, f := setup(t)
		f.transient = 1
		row := e.claim(`{"amount":1001}`, adyenRequest())
		e.timedOut(row)
		e.pass(2 * time.Minute)
		if got := e.row(row.Key); got.Status != ledger.StatusUnknown || got.LastHTTPStatus >= 500 {
			t.Fatalf("after a transient error: status %s, last http %d (a transient 5xx must not stop replays)", got.Status, got.LastHTTPStatus)
		}
		e.pass(time.Hour)
		wantStatus(t, e.row(row.Key), ledger.StatusSucceeded)
		if f.payments != 1 {
			t.Errorf("payments %d", f.payments)
		}
	})
	t.Run("a refused payment settles failed", func(t *testing.T) {
		e, f := setup(t)
		f.result = "Refused"
		row := e.claim(`{"amount":1002}`, adyenRequest())
		e.timedOut(row)
		e.pass(2 * time.Minute)
		wantStatus(t, e.row(row.Key), ledger.StatusFailedPoison)
	})
	t.Run("a business key longer than 64 is sent as its digest", func(t *testing.T) {
		e, _ := setup(t)
		key := "order-" + strings.Repeat("9", 70)
		if got := e.profile.VendorKey(key); len(got) != 64 || got == key[:64] {
			t.Errorf("vendor key %q", got)
		}
	})
}
