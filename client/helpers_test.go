package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/internal/fakestripe"
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
	if ms, ok := o.Store.(*memstore.Store); ok {
		e.store = ms // withLease's
	}
	s, err := api.New(o)
	if err != nil {
		t.Fatalf("api: %v", err)
	}
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

// withLease serves a store whose attempts hold a lease of ttl (the
// default is 15 min). It goes before withAutonomy, whose registry reads
// the store.
func withLease(ttl time.Duration) func(*api.Options) {
	return func(o *api.Options) {
		o.Policy = ledger.Policy{PendingTTL: ttl, Grace: time.Second}
		o.Store = memstore.New(o.Policy)
	}
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

// fakeStripe is the client tests' Stripe (fakestripe: it really commits
// and replays a repeated Idempotency-Key with Idempotent-Replayed: true),
// with the views of it they read.
type fakeStripe struct{ *fakestripe.Stripe }

// post is one write the vendor received.
type post struct {
	key, localID, amount string
	replayed             bool
}

// newFakeStripe starts a fake Stripe whose next new keys meet faults.
func newFakeStripe(t *testing.T, faults ...fakestripe.Fault) *fakeStripe {
	t.Helper()
	s := fakestripe.New(t, fakestripe.Options{})
	s.Inject(faults...)
	return &fakeStripe{s}
}

// received returns the writes the vendor received, in order.
func (f *fakeStripe) received() []post {
	var out []post
	for _, r := range f.Requests() {
		if r.Method == http.MethodPost {
			out = append(out, post{key: r.IdempotencyKey, localID: r.Params.Get("metadata[metadata_local_id]"),
				amount: r.Params.Get("amount"), replayed: r.Replayed})
		}
	}
	return out
}

// httpCall is a CallFunc that creates a PaymentIntent over plain HTTP
// through client.Transport, the way a runtime without stripe-go would.
func (f *fakeStripe) httpCall(hc *http.Client) client.CallFunc {
	return func(ctx context.Context, key, localID string) (client.Result, error) {
		form := "amount=1050&currency=usd&metadata[metadata_local_id]=" + localID
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL()+"/v1/payment_intents", strings.NewReader(form))
		if err != nil {
			return client.Result{}, err
		}
		req.Header.Set("Authorization", "Bearer sk_test_123")
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
