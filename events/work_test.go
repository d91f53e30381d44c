package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// workItem is a queued claim's outbox record for tool.
func workItem(i int, tool string) ledger.Event {
	ev := natstest.Event(i, ledger.EventQueued)
	ev.Tool, ev.ReceiptID, ev.VendorEventID, ev.Source = tool, "", "", ledger.SourceRuntime
	ev.Work = &ledger.WorkItem{
		Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, MetadataLocalID: "rl_1",
		Intent:  json.RawMessage(`{"amount":1050}`),
		Request: &ledger.Request{Method: "POST", Path: "/v1/payment_intents", Body: "amount=1050"},
	}
	return ev
}

func ensureWorkStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	st, err := events.EnsureWorkStream(t.Context(), js, events.WorkStreamConfig{})
	if err != nil {
		t.Fatalf("EnsureWorkStream: %v", err)
	}
	return st
}

func TestWorkSubject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		mutate func(*ledger.Event)
		want   string
	}{
		{name: "a dotted tool makes tokens", prefix: "recon", want: "recon_work.acme.stripe.payment_intents.create"},
		{name: "default prefix", want: "recon_work.acme.stripe.payment_intents.create"},
		{name: "a multi-token prefix", prefix: "x.y", want: "x.y_work.acme.stripe.payment_intents.create"},
		{name: "an undotted tool", prefix: "recon", mutate: func(e *ledger.Event) { e.Tool = "send_email" }, want: "recon_work.acme.send_email"},
		{name: "an empty token", prefix: "recon", mutate: func(e *ledger.Event) { e.Tool = "stripe..create" }},
		{name: "a leading dot", prefix: "recon", mutate: func(e *ledger.Event) { e.Tool = ".create" }},
		{name: "not a work item", prefix: "recon", mutate: func(e *ledger.Event) { e.Status = "succeeded" }},
		{name: "no work", prefix: "recon", mutate: func(e *ledger.Event) { e.Work = nil }},
		{name: "a wildcard tenant", prefix: "recon", mutate: func(e *ledger.Event) { e.Tenant = ">" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := workItem(1, "stripe.payment_intents.create")
			if tc.mutate != nil {
				tc.mutate(&ev)
			}
			got, err := events.WorkSubject(tc.prefix, ev)
			if tc.want == "" {
				if !errors.Is(err, events.ErrInvalidEvent) {
					t.Fatalf("WorkSubject: %q, %v; want ErrInvalidEvent", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("WorkSubject: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRelayRoutesWorkItems: work items go to RECON_WORK, one per key,
// under <prefix>_work.<tenant>.<tool> with Nats-Msg-Id <tenant>:<key>;
// every other event to RECON, in commit order; an item whose tool is no
// subject is dropped as invalid.
func TestRelayRoutesWorkItems(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	recon := natstest.EnsureStream(t, js)
	work := ensureWorkStream(t, js) // beside RECON: the subjects do not overlap

	out := newFakeOutbox()
	item := workItem(1, "stripe.payment_intents.create")
	again := item // a relay that published before a crash publishes again
	bad := workItem(3, "stripe..create")
	requested := natstest.Event(2, ledger.EventApprovalRequested)
	out.add(item, requested, again, bad, natstest.Event(4, "succeeded"))
	reg := prometheus.NewRegistry()
	r, err := events.NewRelay(out, js, fastRelay(relayMetrics(t, reg), 100))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "outbox drained", func() bool { return out.len() == 0 })

	msgs := streamMsgs(t, work)
	if len(msgs) != 1 {
		t.Fatalf("RECON_WORK holds %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.Subject != "recon_work.acme.stripe.payment_intents.create" || m.Header.Get(jetstream.MsgIDHeader) != "acme:"+item.Key {
		t.Fatalf("work message: subject %q msg id %q", m.Subject, m.Header.Get(jetstream.MsgIDHeader))
	}
	var got ledger.Event
	if err := json.Unmarshal(m.Data, &got); err != nil || got.Work == nil || got.Work.Request.Path != "/v1/payment_intents" || string(got.Work.Intent) != `{"amount":1050}` {
		t.Fatalf("work body: %s %v", m.Data, err)
	}
	checkStream(t, recon, []ledger.Event{requested, natstest.Event(4, "succeeded")})
	if n := metric(t, reg, "reconciler_relay_publishes_total", events.ResultDuplicate); n != 1 {
		t.Errorf("duplicates: %v, want 1", n)
	}
	if n := metric(t, reg, "reconciler_relay_publishes_total", events.ResultInvalid); n != 1 {
		t.Errorf("invalid: %v, want 1", n)
	}

	// Work-queue retention: a worker's ack removes the item.
	cons, err := js.CreateOrUpdateConsumer(t.Context(), events.DefaultWorkStream, jetstream.ConsumerConfig{
		Durable: "worker-acme", FilterSubject: "recon_work.acme.>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		if err := msg.DoubleAck(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the acked item gone", func() bool { return natstest.StreamCount(t, work) == 0 })
}

func TestEnsureWorkStream(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	natstest.EnsureStream(t, js)
	st := ensureWorkStream(t, js)
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Name != "RECON_WORK" || len(c.Subjects) != 1 || c.Subjects[0] != "recon_work.>" || c.Retention != jetstream.WorkQueuePolicy ||
		c.Storage != jetstream.FileStorage || c.Duplicates != events.DefaultDuplicates {
		t.Fatalf("work stream: %+v", c)
	}
	// Again, as every replica does at start: the same stream.
	ensureWorkStream(t, js)
	// A stream of that name with another retention is refused, not changed.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER_WORK", Subjects: []string{"other_work.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureWorkStream(ctx, js, events.WorkStreamConfig{Name: "OTHER_WORK", SubjectPrefix: "other"}); err == nil {
		t.Fatal("EnsureWorkStream took over a limits-retention stream")
	}
}
