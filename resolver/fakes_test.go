package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fakePayPal is a PayPal REST API: OAuth tokens, orders remembered by
// PayPal-Request-Id (a repeat returns the original), retrieve by id, and
// an outage switch that makes every call hang until the client gives up.
type fakePayPal struct {
	srv *httptest.Server

	release chan struct{} // closed at cleanup: hung calls end

	mu      sync.Mutex
	hang    bool
	byReqID map[string]map[string]any
	orders  map[string]map[string]any
	tokens  int
	calls   int
}

func newFakePayPal(t *testing.T) *fakePayPal {
	f := &fakePayPal{byReqID: map[string]map[string]any{}, orders: map[string]map[string]any{}, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.release) }) // runs first

	return f
}

func (f *fakePayPal) serve(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice a client that
	// hangs up, and cancel r.Context().
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	f.calls++
	if f.hang {
		f.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	}
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/oauth2/token":
		if u, p, ok := r.BasicAuth(); !ok || u != "client" || p != "secret" {
			writeJSON(w, 401, map[string]any{"error": "invalid_client"})
			return
		}
		f.tokens++
		writeJSON(w, 200, map[string]any{"access_token": fmt.Sprintf("tok%d", f.tokens), "expires_in": 32400})
	case r.Header.Get("Authorization") == "":
		writeJSON(w, 401, map[string]any{"name": "AUTHENTICATION_FAILURE"})
	case r.Method == http.MethodPost && r.URL.Path == "/v2/checkout/orders":
		id := r.Header.Get("PayPal-Request-Id")
		if o, ok := f.byReqID[id]; ok && id != "" {
			writeJSON(w, 200, o)
			return
		}
		o := map[string]any{"id": fmt.Sprintf("ORDER%d", len(f.orders)+1), "status": "CREATED"}
		f.orders[o["id"].(string)] = o
		if id != "" {
			f.byReqID[id] = o
		}
		writeJSON(w, 201, o)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v2/checkout/orders/"):
		o, ok := f.orders[strings.TrimPrefix(r.URL.Path, "/v2/checkout/orders/")]
		if !ok {
			writeJSON(w, 404, map[string]any{"name": "RESOURCE_NOT_FOUND"})
			return
		}
		writeJSON(w, 200, o)
	default:
		writeJSON(w, 404, map[string]any{"name": "RESOURCE_NOT_FOUND"})
	}
}

func (f *fakePayPal) orderCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.orders)
}

// fakePD is a PagerDuty Events v2 endpoint recording every event.
type fakePD struct {
	srv *httptest.Server

	mu     sync.Mutex
	events []map[string]any
	fail   int // answer this status to everything (0: 202)
}

func newFakePD(t *testing.T) *fakePD {
	f := &fakePD{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			w.WriteHeader(400)
			return
		}
		f.mu.Lock()
		f.events = append(f.events, ev)
		code := f.fail
		f.mu.Unlock()
		if code == 0 {
			code = 202
		}
		writeJSON(w, code, map[string]any{"status": "success", "dedup_key": ev["dedup_key"]})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// got returns the recorded events with the given action.
func (f *fakePD) got(action string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, e := range f.events {
		if e["event_action"] == action {
			out = append(out, e)
		}
	}
	return out
}

// within runs fn with a context that ends after d (a test's guard against
// a hang, not a timing assertion).
func within(t *testing.T, d time.Duration, fn func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	fn(ctx)
}
