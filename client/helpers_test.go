package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
)

const (
	tokenAcme  = "tok_acme_5f0c9d7e3b1a"
	tokenAdmin = "tok_admin_8e2a6c4b0d9f"
)

// env is the real API over a memstore, served by httptest.
type env struct {
	store *memstore.Store
	srv   *httptest.Server
	// clock is the API's: real time, which a test can move forward (a
	// lease running out).
	clock *testkit.Clock

	mu     sync.Mutex
	frozen map[string]bool
}

func newEnv(t *testing.T, mods ...func(*api.Options)) *env {
	t.Helper()
	e := &env{store: memstore.New(ledger.DefaultPolicy()), clock: testkit.NewRealClock(), frozen: map[string]bool{}}
	o := api.Options{
		Store:        e.store,
		Tokens:       map[string]string{tokenAcme: "acme"},
		AdminTokens:  []string{tokenAdmin},
		ReplayWindow: func(string, *ledger.Request) time.Duration { return 24 * time.Hour },
		Now:          e.clock.Now,
		PollInterval: 20 * time.Millisecond,
		Frozen: func(tenant, tool string, class ledger.ToolClass) bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.frozen[tool] || e.frozen[string(class)]
		},
	}
	for _, m := range mods {
		m(&o)
	}
	s, err := api.New(o)
	if err != nil {
		t.Fatalf("api: %v", err)
	}
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) freeze(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.frozen[name] = true
}

// client returns an SDK client of the env with fast retries.
func (e *env) client(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	return newClient(t, e.srv.URL, tokenAcme, opts...)
}

func newClient(t *testing.T, url, token string, opts ...client.Option) *client.Client {
	t.Helper()
	base := []client.Option{client.WithRetries(3, time.Millisecond), client.WithPollInterval(20 * time.Millisecond)}
	c, err := client.New(url, token, append(base, opts...)...)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

func (e *env) row(t *testing.T, key string) ledger.Row {
	t.Helper()
	row, err := e.store.Get(context.Background(), "acme", key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return row
}

// chargeClaim is the claim of a 10.50 USD PaymentIntent in run_1.
func chargeClaim(amount int) client.ClaimRequest {
	return client.ClaimRequest{
		RunID: "run_1", Tool: "stripe.payment_intents.create", ToolCallID: "call_1",
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: map[string]any{"amount": amount, "currency": "usd", "customer": "cus_123"},
	}
}

// fault is what the fake vendor does with the next new (never seen) key.
type fault int

const (
	faultNone      fault = iota
	faultHang            // commit the object, then hold the answer until the client gives up
	fault500             // commit nothing, answer 500
	fault409Exists       // the object already exists: 409 with its id
	faultDecline         // 402 card_declined, Stripe-Should-Retry: false
	fault429             // rate limited, nothing committed
	faultReset           // commit the object, then drop the connection without an answer
)

// fakeStripe is a Stripe-like vendor that really commits: it remembers each
// Idempotency-Key and answers a repeated key with the stored object and
// Idempotent-Replayed: true, like Stripe does.
type fakeStripe struct {
	srv *httptest.Server

	mu      sync.Mutex
	faults  []fault
	objects map[string]map[string]any // key → object
	order   []string                  // object ids in creation order
	posts   []post
	release chan struct{}
}

// post is one write the vendor received.
type post struct {
	key, localID, amount string
	replayed             bool
}

func newFakeStripe(t *testing.T, faults ...fault) *fakeStripe {
	t.Helper()
	f := &fakeStripe{faults: faults, objects: map[string]map[string]any{}, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.release)
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/payment_intents") {
		http.NotFound(w, r)
		return
	}
	body := map[string]string{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		for k, v := range m {
			body[k] = fmt.Sprint(v)
		}
		if md, ok := m["metadata"].(map[string]any); ok {
			body["metadata[metadata_local_id]"] = fmt.Sprint(md["metadata_local_id"])
		}
	} else {
		_ = r.ParseForm()
		for k := range r.PostForm {
			body[k] = r.PostForm.Get(k)
		}
	}
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	p := post{key: key, localID: body["metadata[metadata_local_id]"], amount: body["amount"]}
	if obj, ok := f.objects[key]; ok && key != "" {
		p.replayed = true
		f.posts = append(f.posts, p)
		f.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, obj)
		return
	}
	flt := faultNone
	if len(f.faults) > 0 {
		flt, f.faults = f.faults[0], f.faults[1:]
	}
	f.posts = append(f.posts, p)
	commit := func() map[string]any {
		id := fmt.Sprintf("pi_%d", len(f.order)+1)
		amount, _ := strconv.Atoi(body["amount"])
		obj := map[string]any{"id": id, "object": "payment_intent", "amount": amount,
			"currency": body["currency"], "metadata": map[string]any{"metadata_local_id": p.localID}}
		f.order = append(f.order, id)
		if key != "" {
			f.objects[key] = obj
		}
		return obj
	}
	switch flt {
	case faultNone:
		obj := commit()
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, obj)
	case faultHang:
		commit()
		f.mu.Unlock()
		select { // the object exists; the answer never comes in time
		case <-r.Context().Done():
		case <-f.release:
		}
	case faultReset:
		commit()
		f.mu.Unlock()
		hj, _ := w.(http.Hijacker)
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
	case fault500:
		f.mu.Unlock()
		writeJSON(w, http.StatusInternalServerError, stripeErr("api_error", "", "internal", ""))
	case fault409Exists:
		obj := commit()
		f.mu.Unlock()
		writeJSON(w, http.StatusConflict, stripeErr("invalid_request_error", "resource_already_exists", "already exists", obj["id"].(string)))
	case faultDecline:
		obj := commit()
		f.mu.Unlock()
		w.Header().Set("Stripe-Should-Retry", "false")
		writeJSON(w, http.StatusPaymentRequired, stripeErr("card_error", "card_declined", "Your card was declined.", obj["id"].(string)))
	case fault429:
		f.mu.Unlock()
		writeJSON(w, http.StatusTooManyRequests, stripeErr("invalid_request_error", "rate_limit", "too many requests", ""))
	}
}

func stripeErr(typ, code, msg, piID string) map[string]any {
	e := map[string]any{"type": typ, "code": code, "message": msg}
	if piID != "" {
		e["payment_intent"] = map[string]any{"id": piID, "object": "payment_intent"}
	}
	return map[string]any{"error": e}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeStripe) objectCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.order)
}

func (f *fakeStripe) received() []post {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]post(nil), f.posts...)
}

// httpCall is a CallFunc that creates a PaymentIntent over plain HTTP
// through client.Transport, the way a runtime without stripe-go would.
func (f *fakeStripe) httpCall(hc *http.Client) client.CallFunc {
	return func(ctx context.Context, key, localID string) (client.Result, error) {
		form := "amount=1050&currency=usd&metadata[metadata_local_id]=" + localID
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/payment_intents", strings.NewReader(form))
		if err != nil {
			return client.Result{}, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := hc.Do(req)
		if err != nil {
			return client.Result{}, err
		}
		defer resp.Body.Close()
		var obj struct {
			ID    string `json:"id"`
			Error *struct {
				PaymentIntent *struct {
					ID string `json:"id"`
				} `json:"payment_intent"`
			} `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&obj); err != nil {
			return client.ResultFromResponse(resp, ""), fmt.Errorf("decode: %w", err)
		}
		id := obj.ID
		if obj.Error != nil && obj.Error.PaymentIntent != nil {
			id = obj.Error.PaymentIntent.ID
		}
		res := client.ResultFromResponse(resp, id)
		if resp.StatusCode >= 400 {
			return res, fmt.Errorf("vendor answered %d", resp.StatusCode)
		}
		return res, nil
	}
}

// keyedHTTP is an HTTP client whose transport sets Idempotency-Key from the context.
func keyedHTTP(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &client.Transport{Header: "Idempotency-Key"}}
}
