package replicas

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// fakeStripe is a Stripe that holds a succeeded PaymentIntent for every
// local id (the vendor did every charge) and records which process looked
// each one up: the processes carry distinct API keys (sk_test_<id>).
type fakeStripe struct {
	srv *httptest.Server
	mu  sync.Mutex
	// lookups: local id → the ids of the processes that searched for it,
	// in order.
	lookups map[string][]string
}

var searchQuery = regexp.MustCompile(`^metadata\['metadata_local_id'\]:'([^']+)'$`)

func newFakeStripe(tb testing.TB) *fakeStripe {
	f := &fakeStripe{lookups: map[string][]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	tb.Cleanup(f.srv.Close)
	return f
}

// receiptFor is the PaymentIntent id of a local id, the same in the fake's
// answers and in the webhooks the load program sends.
func receiptFor(localID string) string { return "pi_rt_" + strings.TrimPrefix(localID, "rl_") }

func paymentIntent(localID string) map[string]any {
	return map[string]any{
		"id": receiptFor(localID), "object": "payment_intent", "status": "succeeded",
		"amount": 1050, "currency": "usd", "metadata": map[string]string{"metadata_local_id": localID},
	}
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	caller := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "sk_test_")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
		m := searchQuery.FindStringSubmatch(r.URL.Query().Get("query"))
		if m == nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"bad query"}}`))
			return
		}
		f.mu.Lock()
		f.lookups[m[1]] = append(f.lookups[m[1]], caller)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{
			"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false,
			"data": []any{paymentIntent(m[1])},
		})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/pi_rt_"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/payment_intents/")
		_ = json.NewEncoder(w).Encode(paymentIntent("rl_" + strings.TrimPrefix(id, "pi_rt_")))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"no such resource"}}`))
	}
}

func (f *fakeStripe) lookupsOf() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]string, len(f.lookups))
	for k, v := range f.lookups {
		out[k] = append([]string(nil), v...)
	}
	return out
}
