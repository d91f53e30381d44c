package events_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRelayWithStore runs the relay and Await against a real in-memory store:
// a timeout makes the row unknown, a webhook settles it, and a run waiting
// on the key is woken by the succeeded event, not by unknown.
func TestRelayWithStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	store := memstore.New(ledger.DefaultPolicy())

	now := natstest.BaseTime
	claim, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: "acme", RunID: "run-7", Tool: "stripe.payment_intents.create", ToolCallID: "call_1",
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: json.RawMessage(`{"amount":1000,"currency":"usd"}`), ReplayWindow: 24 * time.Hour,
	}, ledger.DefaultPolicy(), now)
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Claim(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	key := res.Row.Key
	if _, _, err := store.Report(ctx, "acme", key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	r, err := events.NewRelay(store, js, fastRelay(relayMetrics(t, reg), 10))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "unknown relayed", func() bool { return natstest.StreamCount(t, st) == 1 })

	awaited := make(chan awaitResult, 1)
	go func() {
		ev, err := events.Await(ctx, js, "acme", "run-7", key)
		awaited <- awaitResult{ev, err}
	}()
	testkit.EventuallyWithin(t, 5*time.Second, "Await's consumer", func() bool { return consumers(t, st) == 1 })
	select {
	case got := <-awaited:
		t.Fatalf("Await returned on unknown: %+v, %v", got.ev, got.err)
	default:
	}

	if _, _, err := store.Apply(ctx, "acme", key, ledger.Evidence{
		Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "pi_123",
		VendorEventID: "evt_1", At: now.Add(2 * time.Second),
	}); err != nil {
		t.Fatal(err)
	}
	got := <-awaited
	if got.err != nil || got.ev.Key != key || got.ev.Status != "succeeded" || got.ev.ReceiptID != "pi_123" || got.ev.RunID != "run-7" {
		t.Fatalf("Await: got %+v, %v; want the succeeded event of %s", got.ev, got.err, key)
	}
	testkit.EventuallyWithin(t, 5*time.Second, "outbox drained", func() bool {
		recs, err := store.PendingEvents(ctx, 10)
		return err == nil && len(recs) == 0
	})
	msgs := streamMsgs(t, st)
	if len(msgs) != 2 || msgs[0].Subject != "recon.acme.run-7.unknown" || msgs[1].Subject != "recon.acme.run-7.succeeded" {
		t.Fatalf("stream: got %d msgs %v, want unknown then succeeded", len(msgs), subjects(msgs))
	}

	// The ledger check alone answers for a settled key when the stream
	// holds nothing for it (purged, or never relayed).
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	settled := func(ctx context.Context) (ledger.Event, bool, error) {
		row, err := store.Get(ctx, "acme", key)
		if err != nil || row.Status.Open() {
			return ledger.Event{}, false, err
		}
		return ledger.Event{Key: row.Key, Tenant: row.Tenant, RunID: row.RunID, Status: string(row.Status), ReceiptID: row.UpstreamReceiptID}, true, nil
	}
	ev, err := events.Await(ctx, js, "acme", "run-7", key, events.WithLedger(settled))
	if err != nil || ev.Status != "succeeded" || ev.ReceiptID != "pi_123" {
		t.Fatalf("Await with ledger: got %+v, %v", ev, err)
	}
}

func subjects(msgs []*jetstream.RawStreamMsg) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Subject)
	}
	return out
}

// gatedPublisher holds each publish until released, so a test can end the
// relay's context while a publish is in flight.
type gatedPublisher struct {
	js      jetstream.JetStream
	started chan string
	release chan struct{}
}

func (g *gatedPublisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	g.started <- m.Subject
	<-g.release
	return g.js.PublishMsgAsync(m, opts...)
}

// TestRelayStopFinishesInFlight: cancelling Run during a publish finishes
// that publish, deletes its record, publishes nothing after it, and returns.
func TestRelayStopFinishesInFlight(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	evs := []ledger.Event{natstest.Event(0, "succeeded"), natstest.Event(1, "succeeded"), natstest.Event(2, "succeeded")}
	out.add(evs...)
	g := &gatedPublisher{js: js, started: make(chan string, 3), release: make(chan struct{})}
	r, err := events.NewRelay(out, g, fastRelay(nil, 10))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if got := <-g.started; got != "recon.acme.run-1.succeeded" {
		t.Fatalf("first publish on %q", got)
	}
	cancel()
	close(g.release)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := len(g.started); got != 0 {
		t.Fatalf("%d publishes started after cancel, want 0", got)
	}
	checkStream(t, st, evs[:1])
	if got := out.len(); got != 2 {
		t.Fatalf("outbox after stop: %d records, want 2 (the in-flight one deleted)", got)
	}
}
