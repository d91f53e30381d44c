package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRelayFullStreamIsAnOutage (issue #25): a stream at its byte limit
// refuses new events (discard new); the relay keeps them in the outbox,
// reports the full stream as unhealthy, and publishes them, once each and
// each row's in order, when there is room again. No acknowledged event is lost.
func TestRelayFullStreamIsAnOutage(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const limit = 4 << 10
	st, err := events.EnsureStream(ctx, js, events.StreamConfig{Limits: events.StreamLimits{MaxBytes: limit, MaxMsgSize: 1 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxBytes != limit || c.MaxMsgSize != 1<<10 || c.Discard != jetstream.DiscardNew {
		t.Fatalf("stream config: max bytes %d, max msg size %d, discard %v", c.MaxBytes, c.MaxMsgSize, c.Discard)
	}
	out := newFakeOutbox()
	var want []ledger.Event
	for i := range 60 { // a few hundred bytes each: several times the limit
		want = append(want, natstest.Event(i, "succeeded"))
	}
	out.add(want...)
	r, err := events.NewRelay(out, js, fastRelay(nil, 100))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "the full stream reported", func() bool {
		return errors.Is(r.Healthy(), events.ErrStreamFull) && out.len() > 0
	})
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > limit || info.State.Msgs == 0 {
		t.Fatalf("stream holds %d messages, %d bytes; want some, within %d", info.State.Msgs, info.State.Bytes, limit)
	}
	if int(info.State.Msgs)+out.len() != len(want) {
		t.Fatalf("%d in the stream + %d in the outbox, want %d: an event was lost", info.State.Msgs, out.len(), len(want))
	}

	// Room again (the operator raised the limit): the rest is published.
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Limits: events.StreamLimits{MaxBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 20*time.Second, "outbox drained", func() bool { return out.len() == 0 && r.Healthy() == nil })
	checkStreamOnce(t, st, want)
}

// TestEnsureStreamLimits: a zero limit keeps what an existing stream has;
// the work stream always discards new.
func TestEnsureStreamLimits(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Limits: events.StreamLimits{MaxBytes: 1 << 20, MaxMsgSize: 4096, DiscardOld: true}}); err != nil {
		t.Fatal(err)
	}
	st, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxBytes != 1<<20 || c.MaxMsgSize != 4096 || c.Discard != jetstream.DiscardOld {
		t.Errorf("kept limits: %d, %d, %v", c.MaxBytes, c.MaxMsgSize, c.Discard)
	}
	ws, err := events.EnsureWorkStream(ctx, js, events.WorkStreamConfig{MaxBytes: 1 << 20, MaxMsgSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if c := ws.CachedInfo().Config; c.MaxBytes != 1<<20 || c.MaxMsgSize != 4096 || c.Discard != jetstream.DiscardNew {
		t.Errorf("work stream limits: %d, %d, %v", c.MaxBytes, c.MaxMsgSize, c.Discard)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Limits: events.StreamLimits{MaxBytes: -1}}); err == nil {
		t.Error("a negative max bytes was taken")
	}

	// A limit below what the stream holds is not applied: the server
	// would drop stored events (work items) to meet it.
	for i := range 20 {
		if _, err := js.Publish(ctx, fmt.Sprintf("recon_work.acme.tool%d", i), make([]byte, 512)); err != nil {
			t.Fatal(err)
		}
	}
	ws, err = events.EnsureWorkStream(ctx, js, events.WorkStreamConfig{MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if info := ws.CachedInfo(); info.Config.MaxBytes != 1<<20 || info.State.Msgs != 20 {
		t.Errorf("after a limit below its size: max bytes %d, %d messages; want 1MiB kept, all 20", info.Config.MaxBytes, info.State.Msgs)
	}
}
