package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/durable"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// TestConsume: a body that is not an event is dropped for good, an event
// of another status is never handed over, and a failed event comes back
// until its handler succeeds; after that nothing is pending or unacked,
// and Consume returns nil once ctx ends.
func TestConsume(t *testing.T) {
	js := natstest.Connect(t, natstest.Start(t, t.TempDir(), "", false).ClientURL())
	natstest.EnsureStream(t, js)
	var (
		mu    sync.Mutex
		calls []string
		fails = 2
	)
	handle := func(_ context.Context, ev ledger.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, ev.Key+"/"+ev.Status)
		if fails > 0 {
			fails--
			return errors.New("pager down")
		}
		return nil
	}
	o := durable.Options{
		Name: "test consumer", Stream: "RECON", SubjectPrefix: "recon", Durable: "test-durable",
		Statuses: []string{string(ledger.StatusSucceeded)}, MaxAckPending: 1,
		Timeout: 5 * time.Second, RetryDelay: 10 * time.Millisecond, Failure: "handle failed",
	}
	publish := func(subject string, body []byte) {
		t.Helper()
		if _, err := js.Publish(t.Context(), subject, body); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	ev, _ := json.Marshal(ledger.Event{Key: "k1", Tenant: "acme", RunID: "run_1", Status: string(ledger.StatusSucceeded)})
	other, _ := json.Marshal(ledger.Event{Key: "k2", Tenant: "acme", RunID: "run_1", Status: string(ledger.StatusUnknown)})
	publish("recon.acme.run_1.succeeded", []byte("not json"))
	publish("recon.acme.run_1.unknown", other)
	publish("recon.acme.run_1.succeeded", ev)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- durable.Consume(ctx, js, o, handle) }()
	testkit.Eventually(t, "every message settled", func() bool {
		c, err := js.Consumer(t.Context(), "RECON", "test-durable")
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream == 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"k1/succeeded", "k1/succeeded", "k1/succeeded"}; !slices.Equal(calls, want) {
		t.Fatalf("handled %v, want %v (twice failed, then acked)", calls, want)
	}
}
