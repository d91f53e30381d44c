package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
)

// fakeStripe is a stateful Stripe: it commits objects, remembers them by
// id and by metadata, stores the first answer per Idempotency-Key and
// replays it (a stored 500 included), answers Search only once an object
// is older than its lag (by the injected clock), can commit and then hang
// until the client gives up, and answers 429/500 on demand.
type fakeStripe struct {
	t     *testing.T
	clock *testkit.Clock
	srv   *httptest.Server

	mu sync.Mutex
	// objects by id; order keeps creation order for lists.
	objects map[string]map[string]any
	order   []string
	created map[string]time.Time
	// stored answers by Idempotency-Key.
	stored map[string]storedAnswer
	// settings
	searchLag         time.Duration
	searchUnavailable bool
	hangNextCreate    bool             // commit the next create, then never answer
	store500NextKey   bool             // the next create stores a 500 and commits nothing
	failWith          []int            // answer the next requests with these codes
	failAll           int              // answer every request with this code (0: off)
	createStatus      string           // status of created payment intents
	events            []map[string]any // for List Events, newest last
	// what it saw
	requests []string // "GET /v1/payment_intents/search"
	postKeys []string // Idempotency-Key of every POST
	seq      int
}

type storedAnswer struct {
	code int
	body []byte
}

func newFakeStripe(t *testing.T, c *testkit.Clock) *fakeStripe {
	f := &fakeStripe{
		t: t, clock: c, objects: map[string]map[string]any{}, created: map[string]time.Time{},
		stored: map[string]storedAnswer{}, createStatus: "succeeded", searchLag: time.Minute,
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeStripe) set(fn func(f *fakeStripe)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeStripe) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeStripe) objectCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.objects)
}

func (f *fakeStripe) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.postKeys...)
}

// put adds an object as if created at at.
func (f *fakeStripe) put(obj map[string]any, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := obj["id"].(string)
	if _, ok := f.objects[id]; !ok {
		f.order = append(f.order, id)
	}
	f.objects[id] = obj
	f.created[id] = at
}

func (f *fakeStripe) setStatus(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[id]["status"] = status
}

var searchQuery = regexp.MustCompile(`^metadata\['([a-z_]+)'\]:'([^']*)'$`)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeStripeError(w http.ResponseWriter, code int, typ, msg string) {
	c, body := stripeError(code, typ, msg)
	writeJSON(w, c, body)
}

func stripeError(code int, typ, msg string) (int, map[string]any) {
	return code, map[string]any{"error": map[string]any{"type": typ, "message": msg}}
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if r.Method == http.MethodPost {
		f.postKeys = append(f.postKeys, r.Header.Get("Idempotency-Key"))
	}
	if r.Header.Get("Authorization") != "Bearer sk_test_fake" {
		f.mu.Unlock()
		writeStripeError(w, 401, "invalid_request_error", "bad key")
		return
	}
	code := f.failAll
	if code == 0 && len(f.failWith) > 0 {
		code, f.failWith = f.failWith[0], f.failWith[1:]
	}
	if code != 0 {
		f.mu.Unlock()
		if code == 429 {
			w.Header().Set("Retry-After", "1")
		}
		writeStripeError(w, code, "api_error", "injected")
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	switch {
	case r.Method == http.MethodPost:
		f.create(w, r, parts, string(body)) // unlocks
		return
	case len(parts) == 2 && parts[1] == "search":
		code, resp := f.search(r.URL.Query().Get("query"))
		f.mu.Unlock()
		writeJSON(w, code, resp)
	case parts[0] == "refunds" && len(parts) == 1:
		resp := f.listRefunds(r.URL.Query())
		f.mu.Unlock()
		writeJSON(w, 200, resp)
	case parts[0] == "events" && len(parts) == 1:
		resp := map[string]any{"object": "list", "data": f.listEvents(), "has_more": false}
		f.mu.Unlock()
		writeJSON(w, 200, resp)
	case len(parts) == 2:
		obj, ok := f.objects[parts[1]]
		f.mu.Unlock()
		if !ok {
			writeStripeError(w, 404, "invalid_request_error", "No such object: "+parts[1])
			return
		}
		writeJSON(w, 200, obj)
	default:
		f.mu.Unlock()
		writeStripeError(w, 404, "invalid_request_error", "unknown path")
	}
}

// create handles a POST (with f.mu held): the idempotency layer first.
func (f *fakeStripe) create(w http.ResponseWriter, r *http.Request, parts []string, body string) {
	key := r.Header.Get("Idempotency-Key")
	if a, ok := f.stored[key]; ok && key != "" {
		f.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.code)
		_, _ = w.Write(a.body)
		return
	}
	if f.store500NextKey {
		f.store500NextKey = false
		_, resp := stripeError(500, "api_error", "internal")
		b, _ := json.Marshal(resp)
		f.stored[key] = storedAnswer{500, b}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		_, _ = w.Write(b)
		return
	}
	form, _ := url.ParseQuery(body)
	f.seq++
	res := parts[0]
	prefix := map[string]string{"payment_intents": "pi", "refunds": "re", "customers": "cus", "charges": "ch"}[res]
	obj := map[string]any{
		"id": fmt.Sprintf("%s_fake%d", prefix, f.seq), "object": strings.TrimSuffix(res, "s"),
		"status": f.createStatus, "metadata": map[string]any{},
	}
	if res == "refunds" {
		obj["status"] = "succeeded"
		obj["payment_intent"] = form.Get("payment_intent")
	}
	if a := form.Get("amount"); a != "" {
		var n int64
		fmt.Sscan(a, &n)
		obj["amount"] = n
		obj["currency"] = form.Get("currency")
	}
	for k, v := range form {
		if m := strings.TrimPrefix(k, "metadata["); m != k {
			obj["metadata"].(map[string]any)[strings.TrimSuffix(m, "]")] = v[0]
		}
	}
	id := obj["id"].(string)
	f.objects[id] = obj
	f.order = append(f.order, id)
	f.created[id] = f.clock.Now()
	b, _ := json.Marshal(obj)
	if key != "" {
		f.stored[key] = storedAnswer{200, b}
	}
	hang := f.hangNextCreate
	f.hangNextCreate = false
	f.mu.Unlock()
	if hang {
		<-r.Context().Done() // committed; the answer never comes
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	_, _ = w.Write(b)
}

// search answers Stripe Search (with f.mu held): only objects older than
// the lag are visible.
func (f *fakeStripe) search(q string) (int, map[string]any) {
	if f.searchUnavailable {
		return stripeError(400, "invalid_request_error", "Search is not available for your account.")
	}
	m := searchQuery.FindStringSubmatch(q)
	if m == nil {
		return stripeError(400, "invalid_request_error", "bad query "+q)
	}
	data := []any{}
	now := f.clock.Now()
	for _, id := range f.order {
		obj := f.objects[id]
		md, _ := obj["metadata"].(map[string]any)
		if md[m[1]] == m[2] && !now.Before(f.created[id].Add(f.searchLag)) {
			data = append(data, obj)
		}
	}
	return 200, map[string]any{"object": "search_result", "data": data, "has_more": false}
}

func (f *fakeStripe) listRefunds(q url.Values) map[string]any {
	data := []any{}
	for i := len(f.order) - 1; i >= 0; i-- {
		obj := f.objects[f.order[i]]
		if obj["object"] == "refund" && (obj["payment_intent"] == q.Get("payment_intent") || obj["charge"] == q.Get("charge")) {
			data = append(data, obj)
		}
	}
	return map[string]any{"object": "list", "data": data, "has_more": false}
}

func (f *fakeStripe) listEvents() []any {
	data := []any{}
	for i := len(f.events) - 1; i >= 0; i-- {
		data = append(data, f.events[i])
	}
	return data
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
