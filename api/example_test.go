package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

// A runtime claims a key before calling Stripe, reports the answer, and a
// retry of the same intent is told to replay the stored receipt.
func ExampleNew() {
	srv, err := api.New(api.Options{
		Store:        memstore.New(ledger.DefaultPolicy()),
		Tokens:       map[string]string{"tok_acme": "acme"},
		ReplayWindow: func(string, *ledger.Request) time.Duration { return 24 * time.Hour },
	})
	if err != nil {
		panic(err)
	}
	call := func(method, path, body string) (int, map[string]any) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok_acme")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	claim := `{"run_id":"run_1","tool":"stripe.create_payment_intent","vendor":"stripe",
	           "tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd"}}`

	code, out := call(http.MethodPost, "/v1/claims", claim)
	fmt.Println(code, out["decision"])
	key := out["row"].(map[string]any)["key"].(string)

	code, out = call(http.MethodPost, "/v1/claims/"+key+"/outcome", `{"kind":"response","http_status":200,"receipt_id":"pi_1"}`)
	fmt.Println(code, out["row"].(map[string]any)["status"])

	code, out = call(http.MethodPost, "/v1/claims", claim)
	fmt.Println(code, out["decision"], out["row"].(map[string]any)["upstream_receipt_id"])
	// Output:
	// 201 proceed
	// 200 succeeded
	// 200 replay pi_1
}
