package resolver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/resolver"
)

func TestConsumeResolvesPagesFromTheStream(t *testing.T) {
	e := newEnv(t, false)
	js := natstest.JetStream(t)
	e.pd.mu.Lock()
	e.pd.fail = 503 // PagerDuty is down at first: the event must be redelivered
	e.pd.mu.Unlock()

	pr := resolver.NewPageResolver(e.pager, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- pr.Consume(ctx, js, resolver.ConsumeOptions{Timeout: 200 * time.Millisecond, RetryDelay: 50 * time.Millisecond})
	}()
	publish := func(subject string, ev ledger.Event) {
		b, _ := json.Marshal(ev)
		if _, err := js.Publish(context.Background(), subject, b); err != nil {
			t.Fatal(err)
		}
	}
	at := e.clock.Now()
	publish("recon.acme.run1.succeeded", ledger.Event{Key: "k-paged", Tenant: "acme", RunID: "run1", Status: "succeeded", PagedAt: at, At: at})
	publish("recon.acme.run1.succeeded", ledger.Event{Key: "k-unpaged", Tenant: "acme", RunID: "run1", Status: "succeeded", At: at})
	publish("recon.acme.run1.escalated", ledger.Event{Key: "k-paged", Tenant: "acme", RunID: "run1", Status: "escalated", PagedAt: at, At: at})

	// Two events match the filter; a third delivery is the failed one again.
	testkit.Eventually(t, "three deliveries to the consumer", func() bool { return delivered(t, js) >= 3 })
	e.pd.mu.Lock()
	e.pd.fail = 0
	failed := len(e.pd.events)
	e.pd.mu.Unlock()
	testkit.Eventually(t, "the resolve sent and the consumer drained", func() bool { return len(e.pd.got("resolve")) > failed && consumerDrained(t, js) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, ev := range e.pd.got("resolve") {
		if ev["dedup_key"] != "recon:acme:k-paged" {
			t.Errorf("resolve for %v: only the paged row's page is resolved", ev["dedup_key"])
		}
	}
}

// delivered is how many deliveries the page resolver's consumer made.
func delivered(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	c, err := js.Consumer(context.Background(), "RECON", resolver.DefaultPageConsumer)
	if err != nil {
		return 0
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.Delivered.Consumer
}

// consumerDrained reports whether the page resolver's consumer has no
// message pending or awaiting an ack.
func consumerDrained(t *testing.T, js jetstream.JetStream) bool {
	t.Helper()
	c, err := js.Consumer(context.Background(), "RECON", resolver.DefaultPageConsumer)
	if err != nil {
		return false
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return false
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer >= 2
}
