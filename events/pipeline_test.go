package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
)

// manualPublisher hands every message to the test, which answers each
// PubAck when it likes: an ack, a duplicate, an error, or never (the
// relay's timeout). It checks the relay's order rule on every send: no
// record is sent while an earlier record of its key has no PubAck.
type manualPublisher struct {
	mu      sync.Mutex
	t       *testing.T
	flights []*flight
	acked   map[string]bool     // msg ids with a PubAck
	order   map[string][]string // key → msg ids in commit order, to check sends against
	stored  []string            // msg ids acked, in ack order (what a stream would hold)
	maxFly  int
}

type flight struct {
	msg  *nats.Msg
	id   string
	ok   chan *jetstream.PubAck
	err  chan error
	done bool
}

func newManualPublisher(t *testing.T, evs []ledger.Event) *manualPublisher {
	p := &manualPublisher{t: t, acked: map[string]bool{}, order: map[string][]string{}}
	for _, ev := range evs {
		p.order[ev.Key] = append(p.order[ev.Key], ev.MsgID())
	}
	return p
}

func (p *manualPublisher) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := m.Header.Get(jetstream.MsgIDHeader)
	var ev ledger.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		p.t.Errorf("message %s: %v", id, err)
	}
	for _, earlier := range p.order[ev.Key] {
		if earlier == id {
			break
		}
		if !p.acked[earlier] {
			p.t.Errorf("%s sent while the earlier %s of its key has no PubAck", id, earlier)
		}
	}
	f := &flight{msg: m, id: id, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	p.flights = append(p.flights, f)
	p.maxFly = max(p.maxFly, p.flyingLocked())
	return doneFuture{msg: m, ok: f.ok, err: f.err}, nil
}

func (p *manualPublisher) flyingLocked() int {
	n := 0
	for _, f := range p.flights {
		if !f.done {
			n++
		}
	}
	return n
}

func (p *manualPublisher) flying() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flyingLocked()
}

// answer resolves every open flight for which pick returns an outcome:
// nil error acks it (a duplicate if it was acked before), errSkip leaves it.
func (p *manualPublisher) answer(pick func(f *flight) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.flights {
		if f.done {
			continue
		}
		err := pick(f)
		if errors.Is(err, errSkip) {
			continue
		}
		f.done = true
		if err != nil {
			f.err <- err
			continue
		}
		dup := p.acked[f.id]
		p.acked[f.id] = true
		if !dup {
			p.stored = append(p.stored, f.id)
		}
		f.ok <- &jetstream.PubAck{Stream: events.DefaultStream, Duplicate: dup}
	}
}

var errSkip = errors.New("leave this flight open")

func (p *manualPublisher) storedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.stored)
}

// keyedEvents returns n events over keys keys (n <= 3*keys), each key's
// statuses in the order a row can take them, interleaved with the other
// keys'.
func keyedEvents(keys, n int) []ledger.Event {
	statuses := []string{"unknown", ledger.EventEscalated, "succeeded"}
	var evs []ledger.Event
	for i := range n {
		ev := natstest.Event(i, statuses[(i/keys)%len(statuses)])
		ev.Key = fmt.Sprintf("key-%03d", i%keys)
		ev.VendorEventID = fmt.Sprintf("evt_%d", i)
		evs = append(evs, ev)
	}
	return evs
}

// TestRelayWindow: the relay keeps up to Window publishes waiting for
// their PubAck at once, never more, and deletes each record after its ack.
func TestRelayWindow(t *testing.T) {
	out := newFakeOutbox()
	evs := keyedEvents(200, 200) // one record per key: nothing waits for its key
	out.add(evs...)
	pub := newManualPublisher(t, evs)
	opts := fastRelay(nil, 50)
	opts.Window = 32
	r, err := events.NewRelay(out, pub, opts)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "a full window in flight", func() bool { return pub.flying() == 32 })
	time.Sleep(50 * time.Millisecond) // room for a relay that would overfill it
	if got := pub.flying(); got != 32 {
		t.Fatalf("in flight with no PubAck: got %d, want the window of 32", got)
	}
	if got := out.len(); got != 200 {
		t.Fatalf("outbox before any PubAck: %d records, want 200", got)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "every record acked and deleted", func() bool {
		pub.answer(func(*flight) error { return nil })
		return out.len() == 0
	})
	if pub.maxFly != 32 {
		t.Errorf("most in flight: got %d, want 32", pub.maxFly)
	}
	if got := len(pub.storedIDs()); got != 200 {
		t.Errorf("stored %d, want 200", got)
	}
}

// TestRelayKeyOrder: with acks answered out of order, some publishes
// failing and some never answered (the relay's timeout), every record is
// stored once and each key's records in commit order; manualPublisher
// fails the test if a record is sent before the previous one of its key
// has its PubAck.
func TestRelayKeyOrder(t *testing.T) {
	out := newFakeOutbox()
	evs := keyedEvents(30, 90) // three records per key
	out.add(evs...)
	pub := newManualPublisher(t, evs)
	reg := prometheus.NewRegistry()
	opts := fastRelay(relayMetrics(t, reg), 10)
	opts.Window = 16
	opts.PublishTimeout = 50 * time.Millisecond
	opts.MinBackoff, opts.MaxBackoff = time.Millisecond, 5*time.Millisecond
	r, err := events.NewRelay(out, pub, opts)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	rng := rand.New(rand.NewPCG(1, 2))
	never := map[*flight]bool{} // the relay times these out (and its retry is a new flight)
	testkit.EventuallyWithin(t, 20*time.Second, "every record stored and deleted", func() bool {
		pub.answer(func(f *flight) error {
			if never[f] {
				return errSkip
			}
			switch n := rng.IntN(20); {
			case n < 1:
				never[f] = true
				return errSkip
			case n < 8:
				return errSkip // a later round: acks out of order
			case n < 10:
				return fmt.Errorf("publish: %w", nats.ErrNoResponders)
			}
			return nil
		})
		time.Sleep(time.Millisecond)
		return out.len() == 0
	})
	// The flights the relay gave up on are answered now: too late to count.
	pub.answer(func(*flight) error { return nil })
	stored := pub.storedIDs()
	if len(stored) != len(evs) {
		t.Fatalf("stored %d messages, want %d", len(stored), len(evs))
	}
	perKey := map[string][]string{}
	for _, id := range stored {
		for _, ev := range evs {
			if ev.MsgID() == id {
				perKey[ev.Key] = append(perKey[ev.Key], id)
			}
		}
	}
	for key, want := range pub.order {
		if got := perKey[key]; !slices.Equal(got, want) {
			t.Errorf("key %s stored %v, want %v", key, got, want)
		}
	}
	if errs := metric(t, reg, "reconciler_relay_publishes_total", events.ResultError); errs == 0 {
		t.Errorf("no publish error counted, so the test failed nothing")
	}
	t.Logf("errors %v, duplicates %v", metric(t, reg, "reconciler_relay_publishes_total", events.ResultError),
		metric(t, reg, "reconciler_relay_publishes_total", events.ResultDuplicate))
}

// TestRelayHoldsUntilSynced: with SyncedAfter, an acknowledged record stays
// in the outbox until SyncedAfter has passed on the relay's clock, without
// being published again meanwhile; the held records are then deleted
// together. A relay stopped while it holds records leaves them, and the
// next one publishes them again (the stream's duplicates window drops
// them).
func TestRelayHoldsUntilSynced(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	clk := testkit.NewClock(natstest.BaseTime.Add(time.Hour))
	out := newFakeOutbox()
	first := []ledger.Event{natstest.Event(0, "succeeded"), natstest.Event(1, "unknown"), natstest.Event(2, "succeeded")}
	out.add(first...)
	reg := prometheus.NewRegistry()
	opts := fastRelay(relayMetrics(t, reg), 10)
	opts.Now, opts.SyncedAfter = clk.Now, 3*time.Second
	r, err := events.NewRelay(out, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "published", func() bool { return natstest.StreamCount(t, st) == 3 })
	testkit.EventuallyWithin(t, 10*time.Second, "healthy", func() bool { return r.Healthy() == nil })

	clk.Advance(time.Second)
	second := []ledger.Event{natstest.Event(3, "succeeded")}
	out.add(second...)
	testkit.EventuallyWithin(t, 10*time.Second, "the later record published", func() bool { return natstest.StreamCount(t, st) == 4 })
	time.Sleep(200 * time.Millisecond) // several Intervals and delete rounds
	if got := out.len(); got != 4 {
		t.Fatalf("outbox within SyncedAfter of the PubAcks: %d records, want all 4 held", got)
	}
	if depth, _ := r.Backlog(); depth != 0 {
		t.Errorf("backlog while every record is held: %d, want 0 (held records are published)", depth)
	}
	clk.Advance(2 * time.Second) // the first three are 3 s past their PubAck
	testkit.EventuallyWithin(t, 10*time.Second, "the first three deleted", func() bool { return out.len() == 1 })
	if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultPublished); got != 4 {
		t.Errorf("published: got %v, want 4 (a held record is not published again)", got)
	}

	// Stopped while holding the fourth: it stays, and the next relay
	// publishes it again, which JetStream drops as a duplicate.
	stop()
	if got := out.len(); got != 1 {
		t.Fatalf("outbox after stop: %d records, want the held one", got)
	}
	reg2 := prometheus.NewRegistry()
	opts.Metrics = relayMetrics(t, reg2)
	r2, err := events.NewRelay(out, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r2)
	testkit.EventuallyWithin(t, 10*time.Second, "republished", func() bool {
		return metric(t, reg2, "reconciler_relay_publishes_total", events.ResultDuplicate) == 1
	})
	clk.Advance(3 * time.Second)
	testkit.EventuallyWithin(t, 10*time.Second, "deleted after its hold", func() bool { return out.len() == 0 })
	checkStream(t, st, append(first, second...))
}

// TestRelayRepublishesHeldAfterReconnect: a server that restarts having
// lost what it had not synced (here: all of it) gets the records the relay
// still holds again, after the relay's reconnect.
func TestRelayRepublishesHeldAfterReconnect(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	url := s.ClientURL()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.Port(t, url))
	js := natstest.Connect(t, url)
	natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	evs := []ledger.Event{natstest.Event(0, "unknown"), natstest.Event(1, "succeeded"), natstest.Event(0, "succeeded")}
	evs[2].Key = evs[0].Key
	out.add(evs...)
	opts := fastRelay(nil, 10)
	opts.Now, opts.SyncedAfter = nil, events.MaxSyncedAfter // held for the whole test
	r, err := events.NewRelay(out, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "published and healthy", func() bool {
		return r.Healthy() == nil && streamCountAt(t, js) == 3
	})

	// The new server starts from an empty store, as one that lost power
	// before its first sync would.
	natstest.Shutdown(t, s)
	s2 := natstest.Start(t, t.TempDir(), listen, false)
	if s2.ClientURL() != url {
		t.Fatalf("restarted on %s, want %s", s2.ClientURL(), url)
	}
	st2 := natstest.EnsureStream(t, natstest.Connect(t, url))
	testkit.EventuallyWithin(t, 20*time.Second, "held records published again", func() bool { return natstest.StreamCount(t, st2) == 3 })
	checkStream(t, st2, evs)
	if got := out.len(); got != 3 {
		t.Errorf("outbox: %d records, want the 3 still held", got)
	}
}

// TestRelayBacklog: the depth and oldest gauges (and Backlog) show records
// waiting behind a stalled publish, and fall to zero once they are out.
func TestRelayBacklog(t *testing.T) {
	out := newFakeOutbox()
	evs := keyedEvents(300, 300)
	out.add(evs...)
	pub := newManualPublisher(t, evs)
	reg := prometheus.NewRegistry()
	opts := fastRelay(relayMetrics(t, reg), 10)
	opts.Window = 5
	r, err := events.NewRelay(out, pub, opts)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	// fastRelay's clock stands an hour after natstest.BaseTime; event i is i seconds after it.
	wantOldest := time.Hour.Seconds()
	testkit.EventuallyWithin(t, 10*time.Second, "the backlog counted", func() bool {
		depth, oldest := r.Backlog()
		return depth == 300 && oldest == time.Hour
	})
	if got := metric(t, reg, "reconciler_outbox_depth", ""); got != 300 {
		t.Errorf("reconciler_outbox_depth: got %v, want 300", got)
	}
	if got := metric(t, reg, "reconciler_outbox_oldest_seconds", ""); got != wantOldest {
		t.Errorf("reconciler_outbox_oldest_seconds: got %v, want %v", got, wantOldest)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "drained", func() bool {
		pub.answer(func(*flight) error { return nil })
		return out.len() == 0
	})
	testkit.EventuallyWithin(t, 10*time.Second, "the gauges at zero", func() bool {
		depth, oldest := r.Backlog()
		return depth == 0 && oldest == 0 && metric(t, reg, "reconciler_outbox_depth", "") == 0
	})
}

func TestRelaySyncedAfterBounds(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, events.MaxSyncedAfter + time.Second} {
		if _, err := events.NewRelay(newFakeOutbox(), syncPublisher(nil), events.RelayOptions{SyncedAfter: d}); err == nil {
			t.Errorf("SyncedAfter %s: no error", d)
		}
	}
}

// streamCountAt is the default stream's message count through js.
func streamCountAt(tb testing.TB, js jetstream.JetStream) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return 0
	}
	return natstest.StreamCount(tb, st)
}

// TestRelayKeepsHeldWhileServerDown: a held record is deleted only once
// the server has answered a ping after its SyncedAfter, on the connection
// that carried its PubAck. A server that went away before that (it may
// not have synced) leaves the record in the outbox, and after the
// reconnect the relay publishes it again; only then is it deleted.
func TestRelayKeepsHeldWhileServerDown(t *testing.T) {
	dir := t.TempDir()
	s := natstest.Start(t, dir, "", false)
	url := s.ClientURL()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.Port(t, url))
	js := natstest.Connect(t, url)
	natstest.EnsureStream(t, js)
	out := newFakeOutbox()
	evs := []ledger.Event{natstest.Event(0, "succeeded"), natstest.Event(1, "succeeded")}
	out.add(evs...)
	reg := prometheus.NewRegistry()
	opts := fastRelay(relayMetrics(t, reg), 10)
	opts.Now, opts.SyncedAfter = nil, 300*time.Millisecond
	r, err := events.NewRelay(out, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "published", func() bool {
		return metric(t, reg, "reconciler_relay_publishes_total", events.ResultPublished) == 2
	})
	natstest.Shutdown(t, s) // within SyncedAfter of the PubAcks
	time.Sleep(time.Second)
	if got := out.len(); got != 2 {
		t.Fatalf("outbox with the server gone: %d records, want both still held", got)
	}
	natstest.Start(t, dir, listen, false)
	testkit.EventuallyWithin(t, 20*time.Second, "published again and deleted", func() bool { return out.len() == 0 })
	if got := metric(t, reg, "reconciler_relay_publishes_total", events.ResultDuplicate); got != 2 {
		t.Errorf("duplicates: got %v, want 2 (the restarted server had kept both)", got)
	}
}
