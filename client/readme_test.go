package client_test

import (
	"context"
	"errors"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/stripe/stripe-go/v79"
	stripeclient "github.com/stripe/stripe-go/v79/client"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// readmeExample is the README's "For agent runtimes" snippet, kept here so
// it stops compiling when the SDK drifts from it. It is not run: it would
// call the real Stripe.
func readmeExample(ctx context.Context, runID, callID string) {
	rc, _ := client.New("http://127.0.0.1:8080", os.Getenv("RECONCILER_TOKEN"))
	sc := &stripeclient.API{} // StripeBackend puts the ledger key on every write, or refuses it
	sc.Init(os.Getenv("STRIPE_API_KEY"), &stripe.Backends{API: client.NewStripeBackend(nil)})

	out, err := rc.Do(ctx, client.ClaimRequest{
		RunID: runID, Tool: "stripe.payment_intents.create", ToolCallID: callID,
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		// Only what defines the side effect: never a timestamp or an id the model made up.
		Intent: map[string]any{"amount": 1050, "currency": "usd", "customer": "cus_123"},
	}, func(ctx context.Context, key, localID string) (client.Result, error) {
		params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd"),
			Customer: stripe.String("cus_123")}
		params.Context = ctx // carries key and localID: Idempotency-Key and metadata[metadata_local_id]
		pi, err := sc.PaymentIntents.New(params)
		return client.StripeResult(pi, err) // status, pi id, Idempotent-Replayed, Stripe-Should-Retry
	})
	switch {
	case err == nil: // charged once: out.ReceiptID() is the PaymentIntent, new or replayed
		_ = out.ReceiptID()
	case errors.Is(err, client.ErrStopped): // refused (declined, frozen tool): do not retry this intent
	case errors.Is(err, client.ErrUnsettled): // not known yet: pause the run, never retry under a new key
	}
}

var _ = readmeExample

// readmeNATSExample is the README's NATS wait for a runtime on another host.
func readmeNATSExample() {
	nc, js, err := client.ConnectNATS("nats://reconciler.internal:4222", "acme",
		client.NATSCredentials{NKeyFile: "/etc/agent/acme.nk"}) // + CAFile when the bus has TLS
	if err != nil { /* … */
		return
	}
	defer nc.Close()
	rc, _ := client.New("http://reconciler.internal:8080", os.Getenv("RECONCILER_TOKEN"), client.WithNATS(js))
	_ = rc
}

var _ = readmeNATSExample

// readmeAutonomyExample is the README's queued call and Worker.
func readmeAutonomyExample(ctx context.Context, rc *client.Client, js jetstream.JetStream, sc *stripeclient.API,
	claim client.ClaimRequest, call client.CallFunc) {
	_, err := rc.Do(ctx, claim, call) // claim carries Request: the worker calls from it
	var q *client.QueuedError
	if errors.As(err, &q) { /* park run q.RunID until key q.Key settles (its NATS event, or rc.Get) */
	}

	w, err := client.NewWorker(rc, js, "acme", map[string]client.WorkHandler{
		"stripe.payment_intents.create": func(ctx context.Context, item client.WorkItem, key, localID string) (client.Result, error) {
			params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1050), Currency: stripe.String("usd")}
			params.Context = ctx // carries key and localID, as in Do
			pi, err := sc.PaymentIntents.New(params)
			return client.StripeResult(pi, err)
		},
	}, client.WithConcurrency(8))
	if err != nil { /* … */
		return
	}
	go w.Run(ctx)
}

var _ = readmeAutonomyExample
