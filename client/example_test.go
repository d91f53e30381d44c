package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v79"
	stripeclient "github.com/stripe/stripe-go/v79/client"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/registry"
)

// exampleAPI serves the real claim API over an in-memory ledger (the
// service runs it over bbolt or PostgreSQL).
func exampleAPI() *httptest.Server {
	srv, err := api.New(api.Options{
		Store:        memstore.New(ledger.DefaultPolicy()),
		Tokens:       map[string]string{"tok_acme": "acme"},
		ReplayWindow: func(string, *ledger.Request) time.Duration { return 24 * time.Hour },
	})
	if err != nil {
		panic(err)
	}
	return httptest.NewServer(srv.Handler())
}

// exampleStripe is a fake Stripe that remembers idempotency keys: a key it
// has seen gets the same PaymentIntent back, with Idempotent-Replayed.
func exampleStripe() (*httptest.Server, func() (posts int, keys map[string]string)) {
	var mu sync.Mutex
	posts, keys := 0, map[string]string{} // key → pi id
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
		_ = r.ParseForm()
		key := r.Header.Get("Idempotency-Key")
		id, seen := keys[key]
		if !seen {
			id = fmt.Sprintf("pi_%d", len(keys)+1)
			keys[key] = id
		} else {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"object":"payment_intent","amount":1050,"currency":"usd","metadata":{"metadata_local_id":%q}}`,
			id, r.PostForm.Get("metadata[metadata_local_id]"))
	}))
	return srv, func() (int, map[string]string) { mu.Lock(); defer mu.Unlock(); return posts, keys }
}

// A Stripe charge under the ledger: Do claims the key, calls Stripe once
// with it, reports the answer; the same intent again replays the receipt.
func ExampleClient_Do() {
	ctx := context.Background()
	apiSrv := exampleAPI()
	defer apiSrv.Close()
	stripeSrv, seen := exampleStripe()
	defer stripeSrv.Close()

	// stripe-go, with StripeBackend putting the ledger key on every write.
	inner := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(stripeSrv.URL), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	sc := &stripeclient.API{}
	sc.Init("sk_test_123", &stripe.Backends{API: client.NewStripeBackend(inner)})

	rc, err := client.New(apiSrv.URL, "tok_acme")
	if err != nil {
		panic(err)
	}
	claim := client.ClaimRequest{
		RunID: "run_42", Tool: "stripe.payment_intents.create", ToolCallID: "call_1",
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: map[string]any{"amount": 1050, "currency": "usd", "customer": "cus_123"},
	}
	charge := func(ctx context.Context, key, localID string) (client.Result, error) {
		params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
		params.Context = ctx // carries key and localID to StripeBackend
		pi, err := sc.PaymentIntents.New(params)
		return client.StripeResult(pi, err)
	}

	out, err := rc.Do(ctx, claim, charge)
	fmt.Println(out.Decision, out.Row.Status, out.ReceiptID(), err)

	claim.ToolCallID = "call_2" // the harness resumed and the model asked again
	again, err := rc.Do(ctx, claim, charge)
	fmt.Println(again.Decision, again.Called, again.ReceiptID(), again.Key == out.Key, err)

	posts, keys := seen()
	_, keyed := keys[out.Key]
	fmt.Println("stripe saw", posts, "post with the ledger key:", keyed)
	// Output:
	// proceed succeeded pi_1 <nil>
	// replay false pi_1 true <nil>
	// stripe saw 1 post with the ledger key: true
}

// Scrub removes the idempotency fields a model put into a tool call's
// arguments, at any depth, before the runtime dispatches it.
func ExampleScrub() {
	args := map[string]any{
		"amount":          1050,
		"currency":        "usd",
		"idempotency_key": "model-made-up-1",
		"options":         map[string]any{"Idempotency-Key": "model-made-up-2", "expand": "latest_charge"},
		"requestId":       "r-77",
	}
	fmt.Println(client.Scrub(args))
	// Output:
	// map[amount:1050 currency:usd options:map[expand:latest_charge]]
}

// ScrubSchema hides such fields from the tool schema the model sees, so it
// does not try to fill them in.
func ExampleScrubSchema() {
	schema := `{"type":"object",
	  "properties":{"to":{"type":"string"},"message_id":{"type":"string"}},
	  "required":["to","message_id"]}`
	out, err := client.ScrubSchema([]byte(schema))
	fmt.Println(string(out), err)
	// Output:
	// {"properties":{"to":{"type":"string"}},"required":["to"],"type":"object"} <nil>
}

// StripeBackend wraps stripe-go's backend: a write whose context carries a
// ledger key (client.WithKey; Do's call context does) is sent with that key
// and metadata[metadata_local_id]; a write without one is refused.
func ExampleStripeBackend() {
	stripeSrv, seen := exampleStripe()
	defer stripeSrv.Close()
	inner := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(stripeSrv.URL), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	sc := &stripeclient.API{}
	sc.Init("sk_test_123", &stripe.Backends{API: client.NewStripeBackend(inner)})

	params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
	params.Context = client.WithKey(context.Background(), "key_from_the_ledger", "rl_0123")
	pi, err := sc.PaymentIntents.New(params)
	res, err := client.StripeResult(pi, err)
	fmt.Println(res.HTTPStatus, res.ReceiptID, pi.Metadata["metadata_local_id"], err)

	_, keys := seen()
	fmt.Println("sent with the ledger key:", keys["key_from_the_ledger"] == pi.ID)

	unkeyed := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
	_, err = sc.PaymentIntents.New(unkeyed)
	fmt.Println(err)
	// Output:
	// 200 pi_1 rl_0123 <nil>
	// sent with the ledger key: true
	// stripe POST /v1/payment_intents: write without a ledger key: wrap the context with client.WithKey (Do does)
}

// Do of an outbox tool calls nothing: it returns a *QueuedError naming the
// key, for the runtime to park the run on, while the tenant's Worker makes
// the call (WithWaitQueued makes Do wait for the worker's result instead).
func ExampleClient_Do_queued() {
	store := memstore.New(ledger.DefaultPolicy())
	srv, err := api.New(api.Options{
		Store: store, Tokens: map[string]string{"tok_acme": "acme"},
		Registry: registry.New(store, registry.Options{}),
	})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	ctx := context.Background()
	rc, _ := client.New(ts.URL, "tok_acme")
	_, _, err = rc.PutTool(ctx, ledger.Tool{
		Name: "stripe.payment_intents.create", Vendor: "stripe", Class: ledger.ClassWriteIdempotent, SideEffect: "charge",
		KeyPlacement: ledger.KeyPlacement{Header: "Idempotency-Key"}, Autonomy: ledger.AutonomyOutbox,
		Checklist: ledger.Checklist{SideEffectDocumented: true, KeyBornInRuntime: true, LedgerOrUniqueField: true,
			TimeoutLeavesUnknown: true, ErrorClassesMapped: true, DuplicateDeliveryTest: true, CheckedBy: "alice"},
	})
	if err != nil {
		panic(err)
	}
	_, err = rc.Do(ctx, client.ClaimRequest{
		RunID: "run_1", Tool: "stripe.payment_intents.create", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: map[string]any{"amount": 1050, "currency": "usd"},
		// The worker makes the call from the envelope.
		Request: &ledger.Request{Method: "POST", Path: "/v1/payment_intents", Body: "amount=1050&currency=usd"},
	}, func(context.Context, string, string) (client.Result, error) {
		panic("an outbox tool's call is the worker's")
	})
	var q *client.QueuedError
	fmt.Println(errors.As(err, &q), q.RunID, q.Row.Status, q.Row.Attempt)
	// Output: true run_1 pending 0
}

// A Worker makes the calls of an outbox tool's queued work items: every
// worker process of the tenant shares one durable consumer, and each item
// is called once, with the ledger's key, whichever worker takes it.
func ExampleWorker() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	nc, js, err := client.ConnectNATS("nats://reconciler.internal:4222", "acme",
		client.NATSCredentials{NKeyFile: "/etc/agent/acme.nk"})
	if err != nil {
		return
	}
	defer nc.Close()
	rc, _ := client.New("http://reconciler.internal:8080", os.Getenv("RECONCILER_TOKEN"))
	sc := &stripeclient.API{}
	sc.Init(os.Getenv("STRIPE_API_KEY"), &stripe.Backends{API: client.NewStripeBackend(nil)})
	w, err := client.NewWorker(rc, js, "acme", map[string]client.WorkHandler{
		"stripe.payment_intents.create": func(ctx context.Context, item client.WorkItem, key, localID string) (client.Result, error) {
			var in struct {
				Amount   int64  `json:"amount"`
				Currency string `json:"currency"`
			}
			if err := json.Unmarshal(item.Intent, &in); err != nil {
				return client.Result{}, err // reported as no answer: the row goes to the resolver
			}
			params := &stripe.PaymentIntentParams{Amount: stripe.Int64(in.Amount), Currency: stripe.String(in.Currency)}
			params.Context = ctx // carries key and localID to StripeBackend
			pi, err := sc.PaymentIntents.New(params)
			return client.StripeResult(pi, err)
		},
	}, client.WithConcurrency(8))
	if err != nil {
		return
	}
	_ = w.Run(ctx) // until ctx ends
}
