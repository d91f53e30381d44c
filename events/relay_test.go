package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// fastRelay returns relay options that recover quickly in tests; met may
// be nil.
func fastRelay(met events.RelayMetrics, batch int) events.RelayOptions {
	return events.RelayOptions{
		Metrics: met, Batch: batch,
		PublishTimeout: 500 * time.Millisecond, Interval: 50 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Now: func() time.Time { return natstest.BaseTime.Add(time.Hour) },
	}
}

// checkStream verifies the stream holds exactly want, in order, each with
// its subject, JSON body and Nats-Msg-Id.
func checkStream(t *testing.T, st jetstream.Stream, want []ledger.Event) {
	t.Helper()
	msgs := streamMsgs(t, st)
	if len(msgs) != len(want) {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		w := want[i]
		wantSubj := "recon." + w.Tenant + "." + w.RunID + "." + w.Status
		if m.Subject != wantSubj {
			t.Errorf("msg %d subject: got %q, want %q", i, m.Subject, wantSubj)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != w.MsgID() {
			t.Errorf("msg %d Nats-Msg-Id: got %q, want %q", i, got, w.MsgID())
		}
		var got ledger.Event
		if err := json.Unmarshal(m.Data, &got); err != nil {
			t.Fatalf("msg %d body: %v", i, err)
		}
		if got != w {
			t.Errorf("msg %d body: got %+v, want %+v", i, got, w)
		}
	}
}

// checkStreamOnce verifies the stream holds exactly want, each event once,
// with its subject, body and Nats-Msg-Id, and every row's events in their
// order. Rows may interleave: the relay orders only within a row
// (docs/architecture.md §6), and a retry after an outage publishes the
// records still waiting while later rows' publishes had gone through.
func checkStreamOnce(t *testing.T, st jetstream.Stream, want []ledger.Event) {
	t.Helper()
	msgs := streamMsgs(t, st)
	if len(msgs) != len(want) {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), len(want))
	}
	byID := make(map[string]ledger.Event, len(want))
	for _, w := range want {
		byID[w.MsgID()] = w
	}
	last := map[string]int{} // row key -> index in want of its last event seen
	index := make(map[string]int, len(want))
	for i, w := range want {
		index[w.MsgID()] = i
	}
	for i, m := range msgs {
		id := m.Header.Get(jetstream.MsgIDHeader)
		w, ok := byID[id]
		if !ok {
			t.Fatalf("msg %d: Nats-Msg-Id %q unexpected or published twice", i, id)
		}
		delete(byID, id)
		if subj := "recon." + w.Tenant + "." + w.RunID + "." + w.Status; m.Subject != subj {
			t.Errorf("msg %d subject: got %q, want %q", i, m.Subject, subj)
		}
		var got ledger.Event
		if err := json.Unmarshal(m.Data, &got); err != nil {
			t.Fatalf("msg %d body: %v", i, err)
		}
		if got != w {
			t.Errorf("msg %d body: got %+v, want %+v", i, got, w)
		}
		if prev, seen := last[w.Key]; seen && prev > index[id] {
			t.Errorf("msg %d: row %s's events out of order", i, w.Key)
		}
		last[w.Key] = index[id]
	}
}

func TestRelayPublishesInOrder(t *testing.T) {
	cases := []struct {
		name  string
		batch int
		n     int
	}{
		{name: "one batch", batch: 100, n: 7},
		{name: "several batches", batch: 4, n: 23},
	}
	statuses := []string{"unknown", "succeeded", "failed_poison", ledger.EventEscalated}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Start(t, t.TempDir(), "", false)
			js := natstest.Connect(t, s.ClientURL())
			st := natstest.EnsureStream(t, js)
			out := newFakeOutbox()
			var want []ledger.Event
			for i := range tc.n {
				want = append(want, natstest.Event(i, statuses[i%len(statuses)]))
			}
			out.add(want...)

			reg := prometheus.NewRegistry()
			r, err := events.NewRelay(out, js, fastRelay(relayMetrics(t, reg), tc.batch))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Healthy(); !errors.Is(err, events.ErrRelayNotStarted) {
				t.Fatalf("Healthy before Run: got %v, want ErrRelayNotStarted", err)
			}
			runRelay(t, r)
			testkit.EventuallyWithin(t, 10*time.Second, "outbox drained", func() bool { return out.len() == 0 })
			testkit.EventuallyWithin(t, 10*time.Second, "healthy", func() bool { return r.Healthy() == nil })
			checkStream(t, st, want)

			if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultPublished); got != float64(tc.n) {
				t.Errorf("published counter: got %v, want %d", got, tc.n)
			}
			if got := metric(t, reg, "reconciler_relay_lag_seconds", ""); got != float64(tc.n) {
				t.Errorf("lag observations: got %v, want %d", got, tc.n)
			}
			if got := metric(t, reg, "reconciler_outbox_depth", ""); got != 0 {
				t.Errorf("outbox depth: got %v, want 0", got)
			}

			// A record committed later is published on notification.
			late := natstest.Event(tc.n, "succeeded")
			out.add(late)
			testkit.EventuallyWithin(t, 10*time.Second, "late record drained", func() bool { return out.len() == 0 })
			checkStream(t, st, append(want, late))
		})
	}
}

// TestRelayDuplicatePublish covers a relay that publishes and then fails to
// delete the records (a crash or a store error before AckEvents): the
// republished records are JetStream duplicates, stored once.
func TestRelayDuplicatePublish(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("PubAck reports the duplicate", func(t *testing.T) {
		ev := natstest.Event(100, "succeeded")
		body, _ := json.Marshal(ev)
		subj, _ := events.Subject("recon", ev)
		for i, wantDup := range []bool{false, true} {
			ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: body}, jetstream.WithMsgID(ev.MsgID()))
			if err != nil {
				t.Fatal(err)
			}
			if ack.Duplicate != wantDup {
				t.Fatalf("publish %d: Duplicate got %v, want %v", i, ack.Duplicate, wantDup)
			}
		}
		if got := natstest.StreamCount(t, st); got != 1 {
			t.Fatalf("stream count: got %d, want 1", got)
		}
		if err := st.Purge(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("relay republishes after a lost ack", func(t *testing.T) {
		out := newFakeOutbox()
		out.failAcks = 2
		var want []ledger.Event
		for i := range 5 {
			want = append(want, natstest.Event(i, "succeeded"))
		}
		out.add(want...)
		reg := prometheus.NewRegistry()
		r, err := events.NewRelay(out, js, fastRelay(relayMetrics(t, reg), 100))
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, r)
		testkit.EventuallyWithin(t, 10*time.Second, "outbox drained", func() bool { return out.len() == 0 })
		checkStream(t, st, want)
		if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultPublished); got != 5 {
			t.Errorf("published: got %v, want 5", got)
		}
		if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultDuplicate); got != 10 {
			t.Errorf("duplicates: got %v, want 10 (two lost acks of 5 records)", got)
		}
	})

	t.Run("a second relay after a crash", func(t *testing.T) {
		if err := st.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		// The first relay published a prefix and died before AckEvents:
		// simulate by publishing it directly.
		out := newFakeOutbox()
		var want []ledger.Event
		for i := range 6 {
			want = append(want, natstest.Event(200+i, "failed_poison"))
		}
		out.add(want...)
		for _, ev := range want[:3] {
			body, _ := json.Marshal(ev)
			subj, _ := events.Subject("recon", ev)
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: body}, jetstream.WithMsgID(ev.MsgID())); err != nil {
				t.Fatal(err)
			}
		}
		reg := prometheus.NewRegistry()
		r, err := events.NewRelay(out, js, fastRelay(relayMetrics(t, reg), 100))
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, r)
		testkit.EventuallyWithin(t, 10*time.Second, "outbox drained", func() bool { return out.len() == 0 })
		checkStream(t, st, want)
		if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultDuplicate); got != 3 {
			t.Errorf("duplicates: got %v, want 3", got)
		}
	})
}

// TestRelaySurvivesNATSOutage stops the server while records keep arriving,
// restarts it on the same port and store, and checks every event arrives
// exactly once, in commit order, and that Healthy reported the outage.
func TestRelaySurvivesNATSOutage(t *testing.T) {
	dir := t.TempDir()
	s := natstest.Start(t, dir, "", false)
	url := s.ClientURL()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.Port(t, url))
	js := natstest.Connect(t, url)
	natstest.EnsureStream(t, js)

	out := newFakeOutbox()
	reg := prometheus.NewRegistry()
	r, err := events.NewRelay(out, js, fastRelay(relayMetrics(t, reg), 8))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)

	// A producer commits records all along; it is owned by the test and
	// stops when told.
	var (
		mu   sync.Mutex
		want []ledger.Event
	)
	produced := func() int { mu.Lock(); defer mu.Unlock(); return len(want) }
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopProd:
				return
			case <-tick.C:
			}
			ev := natstest.Event(i, []string{"unknown", "succeeded"}[i%2])
			mu.Lock()
			want = append(want, ev)
			out.add(ev)
			mu.Unlock()
		}
	}()

	testkit.EventuallyWithin(t, 10*time.Second, "some records relayed", func() bool {
		return metric(t, reg, "reconciler_relay_publishes_total", events.ResultPublished) >= 20
	})
	natstest.Shutdown(t, s)
	testkit.EventuallyWithin(t, 10*time.Second, "Healthy reports the outage", func() bool { return r.Healthy() != nil })
	before := produced()
	testkit.EventuallyWithin(t, 10*time.Second, "records committed during the outage", func() bool { return produced() >= before+30 })
	if got := out.len(); got < 30 {
		t.Fatalf("outbox during outage: got %d records, want >= 30 kept", got)
	}

	s2 := natstest.Start(t, dir, listen, false)
	if s2.ClientURL() != url {
		t.Fatalf("restarted on %s, want %s", s2.ClientURL(), url)
	}
	after := produced()
	testkit.EventuallyWithin(t, 20*time.Second, "relay catches up", func() bool {
		return produced() >= after+20 && r.Healthy() == nil
	})
	close(stopProd)
	<-prodDone
	testkit.EventuallyWithin(t, 20*time.Second, "outbox drained", func() bool { return out.len() == 0 })

	js2 := natstest.Connect(t, s2.ClientURL())
	st, err := js2.Stream(context.Background(), events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	checkStream(t, st, want)
	t.Logf("relayed %d events across the outage; errors counted %v, duplicates %v", len(want),
		metric(t, reg, "reconciler_relay_publishes_total", events.ResultError),
		metric(t, reg, "reconciler_relay_publishes_total", events.ResultDuplicate))
	if metric(t, reg, "reconciler_relay_publishes_total", events.ResultError) == 0 {
		t.Errorf("no publish error counted during the outage")
	}
}

func TestRelayHealthyReportsOutboxErrors(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	out.failRead = ledger.ErrUnavailable
	r, err := events.NewRelay(out, js, fastRelay(nil, 10))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "unhealthy", func() bool { return errors.Is(r.Healthy(), ledger.ErrUnavailable) })
	out.mu.Lock()
	out.failRead = nil
	out.mu.Unlock()
	testkit.EventuallyWithin(t, 10*time.Second, "healthy again", func() bool { return r.Healthy() == nil })
}

func TestRelayDropsInvalidRecord(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	bad := natstest.Event(1, "succeeded")
	bad.RunID = "not.a.token"
	good := []ledger.Event{natstest.Event(0, "succeeded"), natstest.Event(2, "succeeded")}
	out.add(good[0], bad, good[1])
	reg := prometheus.NewRegistry()
	r, err := events.NewRelay(out, js, fastRelay(relayMetrics(t, reg), 10))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "outbox drained", func() bool { return out.len() == 0 })
	checkStream(t, st, good)
	if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultInvalid); got != 1 {
		t.Errorf("invalid: got %v, want 1", got)
	}
}

func TestRelayRunOnce(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	r, err := events.NewRelay(newFakeOutbox(), js, fastRelay(nil, 10))
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	testkit.EventuallyWithin(t, 5*time.Second, "first pass", func() bool { return r.Healthy() == nil })
	// Run is guarded: a second concurrent Run fails instead of racing.
	testkit.EventuallyWithin(t, 5*time.Second, "second Run refused", func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return r.Run(ctx) != nil
	})
	stop()
}

// TestRelayWake: Wake publishes at once what waits in the outbox, both
// during a long backoff after a failure (which new commits' notifications
// do not cut short) and during a long idle wait (a lost notification).
func TestRelayWake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(out *fakeOutbox, r *events.Relay) // leaves the relay waiting
	}{
		{"backoff after a failed pass", func(out *fakeOutbox, r *events.Relay) {
			testkit.EventuallyWithin(t, 10*time.Second, "unhealthy", func() bool { return errors.Is(r.Healthy(), ledger.ErrUnavailable) })
			out.mu.Lock()
			out.failRead = nil
			out.mu.Unlock()
			out.add(natstest.Event(1, "succeeded")) // notifies; the backoff ignores it
		}},
		{"idle with the notification lost", func(out *fakeOutbox, r *events.Relay) {
			testkit.EventuallyWithin(t, 10*time.Second, "healthy", func() bool { return r.Healthy() == nil })
			out.mu.Lock()
			out.failRead, out.quiet = nil, true
			out.mu.Unlock()
			out.add(natstest.Event(1, "succeeded"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Start(t, t.TempDir(), "", false)
			js := natstest.Connect(t, s.ClientURL())
			st := natstest.EnsureStream(t, js)
			out := newFakeOutbox()
			if tc.name == "backoff after a failed pass" {
				out.failRead = ledger.ErrUnavailable
			}
			opts := fastRelay(nil, 10)
			opts.Interval, opts.MinBackoff, opts.MaxBackoff = time.Hour, time.Hour, time.Hour
			r, err := events.NewRelay(out, js, opts)
			if err != nil {
				t.Fatal(err)
			}
			runRelay(t, r)
			tc.setup(out, r)
			time.Sleep(300 * time.Millisecond)
			if n := natstest.StreamCount(t, st); n != 0 || out.len() != 1 {
				t.Fatalf("before Wake: stream holds %d, outbox %d; want 0 and 1 (the relay should be waiting)", n, out.len())
			}
			r.Wake()
			testkit.EventuallyWithin(t, 10*time.Second, "published after Wake", func() bool { return natstest.StreamCount(t, st) == 1 && out.len() == 0 })
		})
	}
}

// TestRelayTwoTenantsOneBusinessKey: two tenants resolving the same
// business key to the same status are two messages, not one message and a
// duplicate (the Nats-Msg-Id carries the tenant).
func TestRelayTwoTenantsOneBusinessKey(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	a, b := natstest.Event(1, "succeeded"), natstest.Event(1, "succeeded")
	a.Key, b.Key = "cart-123", "cart-123"
	b.Tenant = "globex"
	out.add(a, b)
	r, err := events.NewRelay(out, js, fastRelay(nil, 10))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "outbox drained", func() bool { return out.len() == 0 })
	checkStream(t, st, []ledger.Event{a, b})
}

// TestRelayDrain: after Run has stopped, Drain publishes what is left in
// the outbox, in order, within its context; it refuses to run beside Run,
// and with NATS unreachable it returns an error and keeps the records.
func TestRelayDrain(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	r, err := events.NewRelay(out, js, fastRelay(nil, 2))
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "relay running", func() bool { return r.Healthy() == nil })
	if err := r.Drain(t.Context()); err == nil {
		t.Fatal("Drain beside Run: no error")
	}
	stop()
	out.mu.Lock()
	out.quiet = true
	out.mu.Unlock()
	evs := []ledger.Event{natstest.Event(0, "succeeded"), natstest.Event(1, "unknown"), natstest.Event(2, "succeeded"), natstest.Event(3, "failed_poison"), natstest.Event(4, "succeeded")}
	out.add(evs...) // committed by the last requests, after Run stopped
	if err := r.Drain(t.Context()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if n := out.len(); n != 0 {
		t.Fatalf("outbox after Drain: %d records", n)
	}
	checkStream(t, st, evs)

	natstest.Shutdown(t, s)
	out.add(natstest.Event(5, "succeeded"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err == nil {
		t.Fatal("Drain with NATS down: no error")
	}
	if n := out.len(); n != 1 {
		t.Fatalf("outbox after a failed Drain: %d records, want 1", n)
	}
}
