package events_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/eventsprom"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Example wires the embedded server, the stream and the relay the way
// cmd/reconciler does, then waits for a key the way a runtime does.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	dir, _ := os.MkdirTemp("", "nats")
	defer os.RemoveAll(dir)
	opts := natsserver.DefaultOptions(dir, log)
	opts.Listen = "127.0.0.1:-1" // the service uses 127.0.0.1:4222
	srv, err := natsserver.Start(ctx, opts)
	if err != nil {
		log.Error("nats", "err", err)
		return
	}
	defer srv.Shutdown(context.Background())

	nc, js, err := events.Connect(srv.ClientURL(), log)
	if err != nil {
		return
	}
	defer nc.Close()
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		return
	}

	store := memstore.New(ledger.DefaultPolicy()) // bolt or postgres in the service
	// The service registers them on the registry /metrics serves.
	met, err := eventsprom.NewRelayMetrics(prometheus.NewRegistry())
	if err != nil {
		return
	}
	relay, err := events.NewRelay(store, js, events.RelayOptions{Logger: log, Metrics: met})
	if err != nil {
		return
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// A runtime paused on a key:
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	_, err = events.Await(wctx, js, "acme", "run-1", "some-key",
		events.WithLedger(func(ctx context.Context) (ledger.Event, bool, error) {
			return ledger.Event{}, false, nil // ask the claim API here
		}))
	_ = err // context.DeadlineExceeded: nothing settled the key
}
