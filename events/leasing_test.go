package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/postgres"
)

var _ events.LeasingOutbox = (*postgres.Store)(nil)

// countingPublisher counts the publishes of each Nats-Msg-Id, so a record
// handed to two relays shows even when JetStream's dedupe hides it.
type countingPublisher struct {
	js jetstream.JetStream
	mu sync.Mutex
	n  map[string]int
}

func (p *countingPublisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, m, opts...)
	if err == nil {
		p.mu.Lock()
		p.n[m.Header.Get(jetstream.MsgIDHeader)]++
		p.mu.Unlock()
	}
	return resolved(m, ack, err), nil
}

func (p *countingPublisher) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := 0
	for _, n := range p.n {
		t += n
	}
	return t
}

// TestRelaysShareLeasingOutbox runs two relays on two Stores over one
// PostgreSQL schema while writers append two events per key (escalated,
// then succeeded) through both stores. Every record must be published by
// exactly one relay, once, and each key's events must be on the stream in
// commit order: with records deleted at their PubAck, and with records
// held (HoldEvents) until SyncedAfter has passed (ledger/postgres's
// TestClaimEventsReplicas checks that a hold keeps no later record of its
// row waiting).
func TestRelaysShareLeasingOutbox(t *testing.T) {
	for _, syncedAfter := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprintf("synced after %s", syncedAfter), func(t *testing.T) {
			shareLeasingOutbox(t, syncedAfter)
		})
	}
}

func shareLeasingOutbox(t *testing.T, syncedAfter time.Duration) {
	u := pgtest.Schema(t)
	stores := pgtest.Stores(t, 2, func(ctx context.Context) (*postgres.Store, error) { return postgres.Open(ctx, u, postgres.Options{}) })
	ctx := context.Background()
	srv := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, srv.ClientURL())
	st := natstest.EnsureStream(t, js)

	const keys = 40
	now := time.Now().UTC()
	rows := make([]ledger.Row, keys)
	for i := range rows {
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charge", Vendor: "stripe",
			ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			ReplayWindow: time.Hour,
		}, ledger.DefaultPolicy(), now)
		if err != nil {
			t.Fatalf("new claim: %v", err)
		}
		res, err := stores[i%2].Claim(ctx, c)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		rows[i] = res.Row
	}

	pubs := [2]*countingPublisher{}
	for i := range pubs {
		pubs[i] = &countingPublisher{js: js, n: map[string]int{}}
		r, err := events.NewRelay(stores[i], pubs[i], events.RelayOptions{Batch: 3, Interval: 20 * time.Millisecond, SyncedAfter: syncedAfter})
		if err != nil {
			t.Fatalf("new relay: %v", err)
		}
		runRelay(t, r)
	}

	// Writers on both stores, while the relays run: escalate, then settle.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < keys; i += 4 {
				s := stores[(i+w)%2]
				if _, _, err := s.Escalate(ctx, "acme", rows[i].Key, time.Now().UTC()); err != nil {
					t.Errorf("escalate %d: %v", i, err)
					return
				}
				ev := ledger.Evidence{Source: ledger.SourceResolver, Status: ledger.StatusSucceeded,
					ReceiptID: fmt.Sprintf("pi_%d", i), At: time.Now().UTC()}
				if _, _, err := stores[1-(i+w)%2].Apply(ctx, "acme", rows[i].Key, ev); err != nil {
					t.Errorf("apply %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	testkit.EventuallyWithin(t, 30*time.Second, "every event on the stream and the outbox empty", func() bool {
		recs, err := stores[0].PendingEvents(ctx, 1)
		return err == nil && len(recs) == 0 && natstest.StreamCount(t, st) == 2*keys
	})

	t.Run("each record published once", func(t *testing.T) {
		got := pubs[0].total() + pubs[1].total()
		if got != 2*keys {
			t.Errorf("publishes: got %d, want %d (relay 0: %d, relay 1: %d)", got, 2*keys, pubs[0].total(), pubs[1].total())
		}
		for i := range pubs {
			for id, n := range pubs[i].n {
				if pubs[1-i].n[id] > 0 || n != 1 {
					t.Errorf("msg id %s: relay %d published it %d times, the other %d", id, i, n, pubs[1-i].n[id])
				}
			}
		}
		t.Logf("relay 0 published %d, relay 1 %d", pubs[0].total(), pubs[1].total())
	})
	t.Run("per key commit order", func(t *testing.T) {
		seen := map[string][]string{}
		for _, m := range streamMsgs(t, st) {
			var ev ledger.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatalf("decode: %v", err)
			}
			seen[ev.Key] = append(seen[ev.Key], ev.Status)
		}
		for _, row := range rows {
			got := fmt.Sprint(seen[row.Key])
			if want := "[escalated succeeded]"; got != want {
				t.Errorf("key %s: got %s, want %s", row.Key, got, want)
			}
		}
	})
}

// TestRelayLeaseMustExceedPublishTimeout: a lease shorter than one publish
// could end mid-publish and let another relay overtake the record.
func TestRelayLeaseMustExceedPublishTimeout(t *testing.T) {
	tests := []struct {
		name    string
		out     events.Outbox
		lease   time.Duration
		wantErr bool
	}{
		{"leasing outbox, lease too short", &leasingFake{fakeOutbox: newFakeOutbox()}, 5 * time.Second, true},
		{"leasing outbox, default lease", &leasingFake{fakeOutbox: newFakeOutbox()}, 0, false},
		{"plain outbox ignores lease", newFakeOutbox(), time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.NewRelay(tc.out, &countingPublisher{}, events.RelayOptions{Lease: tc.lease, PublishTimeout: 5 * time.Second})
			if got := err != nil; got != tc.wantErr {
				t.Errorf("NewRelay error: got %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// leasingFake leases the fake outbox's records like ClaimEvents does
// (a record is handed out again only after its lease ends), with no
// per-row rule: the relay's side of the lease is what it checks.
type leasingFake struct {
	*fakeOutbox
	mu     sync.Mutex
	claims int
	until  map[uint64]time.Time
}

func (l *leasingFake) ClaimEvents(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]ledger.OutboxRecord, error) {
	recs, err := l.PendingEvents(ctx, 1<<20)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims++
	if l.until == nil {
		l.until = map[uint64]time.Time{}
	}
	var out []ledger.OutboxRecord
	for _, r := range recs {
		if len(out) == limit {
			break
		}
		if u, ok := l.until[r.Seq]; ok && now.Before(u) {
			continue
		}
		l.until[r.Seq] = now.Add(lease)
		out = append(out, r)
	}
	return out, nil
}

func (l *leasingFake) HoldEvents(ctx context.Context, until time.Time, seqs ...uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, seq := range seqs {
		l.until[seq] = until
	}
	return nil
}

func (l *leasingFake) claimCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.claims
}

// slowPublisher advances the shared clock by step on every publish: a
// publish that takes most of a lease.
type slowPublisher struct {
	clk  *testkit.Clock
	step time.Duration
	mu   sync.Mutex
	ids  []string
}

func (p *slowPublisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	p.clk.Advance(p.step)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, m.Subject)
	return resolved(m, &jetstream.PubAck{Stream: events.DefaultStream}, nil), nil
}

func (p *slowPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// TestRelayStopsInsideLease: with a 25 s lease and a 5 s publish timeout, a
// relay whose publishes take 12 s each publishes two records of a leased
// batch of three (the third could outlive the lease), leaves the third
// alone while its lease runs, and publishes it after the lease ends.
func TestRelayStopsInsideLease(t *testing.T) {
	clk := testkit.NewClock(natstest.BaseTime)
	out := &leasingFake{fakeOutbox: newFakeOutbox()}
	out.add(natstest.Event(1, "succeeded"), natstest.Event(2, "succeeded"), natstest.Event(3, "succeeded"))
	pub := &slowPublisher{clk: clk, step: 12 * time.Second}
	r, err := events.NewRelay(out, pub, events.RelayOptions{
		Lease: 25 * time.Second, PublishTimeout: 5 * time.Second, Interval: 5 * time.Millisecond, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "two publishes and two later passes", func() bool {
		return pub.count() == 2 && out.len() == 1 && out.claimCount() >= 3
	})
	if got := pub.count(); got != 2 {
		t.Fatalf("publishes while the lease runs: got %d, want 2", got)
	}
	clk.Advance(time.Minute)
	testkit.EventuallyWithin(t, 10*time.Second, "the third record after its lease", func() bool { return out.len() == 0 })
	if got := pub.count(); got != 3 {
		t.Errorf("publishes: got %d, want 3", got)
	}
}

// failOncePublisher fails the first publish of one subject's message,
// then publishes everything.
type failOncePublisher struct {
	mu     sync.Mutex
	failOn string
	failed bool
	ids    []string
}

func (p *failOncePublisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ev ledger.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return nil, err
	}
	if ev.Key == p.failOn && !p.failed {
		p.failed = true
		return nil, fmt.Errorf("publish: %w", nats.ErrConnectionClosed)
	}
	p.ids = append(p.ids, ev.Key)
	return resolved(m, &jetstream.PubAck{Stream: events.DefaultStream}, nil), nil
}

func (p *failOncePublisher) keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...)
}

// TestRelayRetriesHeldRecordsInsideLease: a failed publish leaves the rest
// of a leased batch with the relay, which retries it after its backoff
// while the lease has room, in order, instead of waiting for the lease to
// end (the clock stands still here, so the lease never ends).
func TestRelayRetriesHeldRecordsInsideLease(t *testing.T) {
	clk := testkit.NewClock(natstest.BaseTime)
	out := &leasingFake{fakeOutbox: newFakeOutbox()}
	out.add(natstest.Event(1, "succeeded"), natstest.Event(2, "succeeded"), natstest.Event(3, "succeeded"))
	pub := &failOncePublisher{failOn: natstest.Event(2, "").Key}
	r, err := events.NewRelay(out, pub, events.RelayOptions{
		Interval: 5 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	testkit.EventuallyWithin(t, 10*time.Second, "every record published and acked", func() bool { return out.len() == 0 })
	got := fmt.Sprint(pub.keys())
	if want := fmt.Sprint([]string{natstest.Event(1, "").Key, natstest.Event(2, "").Key, natstest.Event(3, "").Key}); got != want {
		t.Errorf("published: got %s, want %s", got, want)
	}
}
