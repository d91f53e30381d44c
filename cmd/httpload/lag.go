package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/events"
)

// lagTracker joins the time a key's outcome got its 2xx with the time its
// event arrived from the stream. Either may come first: the relay is woken
// by the commit, which precedes the HTTP answer.
type lagTracker struct {
	mu      sync.Mutex
	waiting map[string]time.Time // 2xx seen, event not yet
	early   map[string]time.Time // event seen, 2xx not yet (or never: a failed request)
	lags    []time.Duration
	acked   int // outcomes answered 2xx
	// beforeAck counts events stored before their 2xx reached the client
	// (their lag is recorded as 0); dupes counts a key delivered twice.
	beforeAck, dupes int
	first, last      time.Time // first 2xx, last matched arrival
}

func newLagTracker() *lagTracker {
	return &lagTracker{waiting: make(map[string]time.Time), early: make(map[string]time.Time)}
}

// ack records the 2xx of key's outcome at at.
func (t *lagTracker) ack(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acked++
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if arr, ok := t.early[key]; ok {
		delete(t.early, key)
		t.beforeAck++
		t.match(max(arr.Sub(at), 0), arr)
		return
	}
	t.waiting[key] = at
}

// arrive records key's event stored on the stream at at.
func (t *lagTracker) arrive(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if acked, ok := t.waiting[key]; ok {
		delete(t.waiting, key)
		t.match(at.Sub(acked), at)
		return
	}
	if _, ok := t.early[key]; ok {
		t.dupes++
		return
	}
	t.early[key] = at
}

func (t *lagTracker) match(lag time.Duration, at time.Time) {
	t.lags = append(t.lags, lag)
	if at.After(t.last) {
		t.last = at
	}
}

// missing is the number of acknowledged outcomes whose event has not arrived.
func (t *lagTracker) missing() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiting)
}

// lagSnapshot is a copy of the tracker's figures.
type lagSnapshot struct {
	lags                             []time.Duration // sorted
	acked, missing, unmatched, dupes int
	beforeAck                        int
	first, last                      time.Time
}

func (t *lagTracker) snapshot() lagSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := lagSnapshot{
		lags: slices.Clone(t.lags), acked: t.acked, missing: len(t.waiting),
		unmatched: len(t.early), dupes: t.dupes, beforeAck: t.beforeAck, first: t.first, last: t.last,
	}
	slices.Sort(s.lags)
	return s
}

// observer reads every event stored on the stream through an ordered
// consumer on its own connection (not the relay's) and hands each key's
// arrival time to the tracker. Delivery from a consumer means the message
// is stored (and, with SyncAlways, fsynced).
type observer struct {
	nc *nats.Conn
	cc jetstream.ConsumeContext
}

func startObserver(ctx context.Context, url string, t *lagTracker, now func() time.Time, log *slog.Logger) (_ *observer, err error) {
	nc, js, err := events.Connect(url, log, nats.Name("httpload-observer"))
	if err != nil {
		return nil, fmt.Errorf("observer: %w", err)
	}
	defer func() {
		if err != nil {
			nc.Close()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(cctx, events.DefaultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.DefaultSubjectPrefix + ".>"},
	})
	if err != nil {
		return nil, fmt.Errorf("observer: ordered consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		at := now()
		// Nats-Msg-Id is <tenant>:<key>:<status>; a tenant never holds ':',
		// and a key never does in this run (minted keys are hex).
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if _, rest, ok := strings.Cut(id, ":"); ok {
			if i := strings.LastIndexByte(rest, ':'); i > 0 {
				t.arrive(rest[:i], at)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("observer: consume: %w", err)
	}
	return &observer{nc: nc, cc: cc}, nil
}

// stop ends the consumer, waits for its handler to finish, and closes the
// connection.
func (o *observer) stop() {
	o.cc.Stop()
	<-o.cc.Closed()
	o.nc.Close()
}
