package presets_test

import (
	"encoding/json"
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

// fakeSquare is Square's Payments API: POST /v2/payments carries the key in
// the body field idempotency_key (required, at most 45 characters: a
// longer one is 400 VALUE_TOO_LONG); the same key and body answer the
// original payment, the same key with other parameters is 400
// IDEMPOTENCY_KEY_REUSED; GET /v2/payments/{id}. Bearer auth.
type fakeSquare struct {
	srv      *httptest.Server
	mu       sync.Mutex
	byKey    map[string]squareKey
	payments map[string]map[string]any
}

type squareKey struct {
	params string
	id     string
}

func newFakeSquare(t *testing.T) *fakeSquare {
	f := &fakeSquare{byKey: map[string]squareKey{}, payments: map[string]map[string]any{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func squareErr(w http.ResponseWriter, code int, cat, c, detail string) {
	writeJSON(w, code, map[string]any{"errors": []any{map[string]any{"category": cat, "code": c, "detail": detail}}})
}

func (f *fakeSquare) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		squareErr(w, 401, "AUTHENTICATION_ERROR", "UNAUTHORIZED", "This request could not be authorized.")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v2/payments":
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			squareErr(w, 400, "INVALID_REQUEST_ERROR", "INVALID_BODY", "Invalid JSON")
			return
		}
		key, _ := in["idempotency_key"].(string)
		switch {
		case key == "":
			squareErr(w, 400, "INVALID_REQUEST_ERROR", "MISSING_REQUIRED_PARAMETER", "Field must be set")
			return
		case len(key) > 45:
			squareErr(w, 400, "INVALID_REQUEST_ERROR", "VALUE_TOO_LONG", "Field must not be greater than 45 length")
			return
		}
		delete(in, "idempotency_key")
		params, _ := json.Marshal(in)
		if k, ok := f.byKey[key]; ok {
			if k.params != string(params) {
				squareErr(w, 400, "INVALID_REQUEST_ERROR", "IDEMPOTENCY_KEY_REUSED", "The idempotency key can only be retried with the same request data.")
				return
			}
			writeJSON(w, 200, map[string]any{"payment": f.payments[k.id]})
			return
		}
		id := fmt.Sprintf("R2B3Z8WMVt3EAmzYWLZvz7Y69E%d", len(f.payments)+1)
		p := map[string]any{"id": id, "status": "COMPLETED", "amount_money": in["amount_money"], "reference_id": in["reference_id"]}
		f.payments[id] = p
		f.byKey[key] = squareKey{params: string(params), id: id}
		writeJSON(w, 200, map[string]any{"payment": p})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v2/payments/"):
		p, ok := f.payments[strings.TrimPrefix(r.URL.Path, "/v2/payments/")]
		if !ok {
			squareErr(w, 404, "INVALID_REQUEST_ERROR", "NOT_FOUND", "Could not find payment")
			return
		}
		writeJSON(w, 200, map[string]any{"payment": p})
	default:
		squareErr(w, 404, "INVALID_REQUEST_ERROR", "NOT_FOUND", "not found")
	}
}

func squareRequest(amount int) *ledger.Request {
	return &ledger.Request{Method: "POST", Path: "/v2/payments", ContentType: "application/json",
		Body: fmt.Sprintf(`{"source_id":"cnon:card-nonce-ok","amount_money":{"amount":%d,"currency":"USD"},"reference_id":"order-7"}`, amount)}
}

func TestSquare(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakeSquare) {
		f := newFakeSquare(t)
		return newEnv(t, newClock(), "square", f.srv.URL, ""), f
	}
	t.Run("a 64-hex key goes as 45 characters, and a replay finds the one payment", func(t *testing.T) {
		e, f := setup(t)
		req := squareRequest(1000)
		row := e.claim(`{"amount":1000}`, req)
		if len(row.Key) != 64 || len(row.VendorKey) != 45 {
			t.Fatalf("key %d characters, vendor key %q", len(row.Key), row.VendorKey)
		}
		if code, b := e.send(row, f.srv.URL, req); code != 200 {
			t.Fatalf("first call: %d %s", code, b)
		}
		e.timedOut(row)
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if len(f.payments) != 1 || got.UpstreamReceiptID != "R2B3Z8WMVt3EAmzYWLZvz7Y69E1" {
			t.Errorf("payments %d receipt %q", len(f.payments), got.UpstreamReceiptID)
		}
	})
	t.Run("the ledger key as is would be refused", func(t *testing.T) {
		_, f := setup(t)
		req, _ := http.NewRequest("POST", f.srv.URL+"/v2/payments", strings.NewReader(`{"idempotency_key":"`+strings.Repeat("a", 64)+`"}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("a 64-character key: %d, want Square's 400", resp.StatusCode)
		}
	})
	t.Run("the key reused with other parameters pages once", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"amount":2000}`, squareRequest(2000))
		e.send(row, f.srv.URL, squareRequest(2500)) // what was really sent differs from the stored envelope
		e.timedOut(row)
		e.pass(2 * time.Minute)
		e.pass(time.Hour)
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		if e.pager.count() != 1 || len(f.payments) != 1 {
			t.Errorf("pages %d payments %d", e.pager.count(), len(f.payments))
		}
	})
}
