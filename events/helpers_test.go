package events_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/eventsprom"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeOutbox behaves like a store's outbox: records in commit order,
// AckEvents deletes, Notify is coalesced. failAcks makes the next n
// AckEvents calls fail (a crash between PubAck and delete).
type fakeOutbox struct {
	mu       sync.Mutex
	recs     []ledger.OutboxRecord
	seq      uint64
	failAcks int
	failRead error
	// quiet: add does not notify (a commit whose notification was lost).
	quiet  bool
	notify chan struct{}
}

func newFakeOutbox() *fakeOutbox { return &fakeOutbox{notify: make(chan struct{}, 1)} }

func (o *fakeOutbox) add(evs ...ledger.Event) {
	o.mu.Lock()
	for _, ev := range evs {
		o.seq++
		o.recs = append(o.recs, ledger.OutboxRecord{Seq: o.seq, Event: ev})
	}
	quiet := o.quiet
	o.mu.Unlock()
	if quiet {
		return
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *fakeOutbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.recs)
}

func (o *fakeOutbox) PendingEvents(ctx context.Context, limit int) ([]ledger.OutboxRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failRead != nil {
		return nil, o.failRead
	}
	n := min(limit, len(o.recs))
	return slices.Clone(o.recs[:n]), nil
}

func (o *fakeOutbox) EventsAfter(ctx context.Context, after uint64, limit int) ([]ledger.OutboxRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failRead != nil {
		return nil, o.failRead
	}
	i, _ := slices.BinarySearchFunc(o.recs, after+1, func(r ledger.OutboxRecord, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	n := min(limit, len(o.recs)-i)
	return slices.Clone(o.recs[i : i+n]), nil
}

func (o *fakeOutbox) CountEvents(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return o.len(), nil
}

func (o *fakeOutbox) AckEvents(ctx context.Context, seqs ...uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failAcks > 0 {
		o.failAcks--
		return fmt.Errorf("ack: %w", ledger.ErrUnavailable)
	}
	o.recs = slices.DeleteFunc(o.recs, func(r ledger.OutboxRecord) bool { return slices.Contains(seqs, r.Seq) })
	return nil
}

func (o *fakeOutbox) Notify() <-chan struct{} { return o.notify }

var _ events.Outbox = (*fakeOutbox)(nil)
var _ events.Outbox = ledger.Outbox(nil)

// syncPublisher adapts a publish that waits for its PubAck to the relay's
// Publisher: it publishes inside PublishMsgAsync, one message at a time,
// and returns a future that is already resolved. Its error is a message
// that was not sent.
type syncPublisher func(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)

func (f syncPublisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	ack, err := f(context.Background(), m, opts...)
	if err != nil {
		return nil, err
	}
	return resolved(m, ack, nil), nil
}

// resolved returns a future that has its PubAck, or its error, already.
func resolved(m *nats.Msg, ack *jetstream.PubAck, err error) jetstream.PubAckFuture {
	f := doneFuture{msg: m, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	if err != nil {
		f.err <- err
	} else {
		f.ok <- ack
	}
	return f
}

type doneFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f doneFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f doneFuture) Err() <-chan error            { return f.err }
func (f doneFuture) Msg() *nats.Msg               { return f.msg }

// runRelay runs r until the test ends and checks that Run returns nil.
func runRelay(tb testing.TB, r *events.Relay) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("relay run: %v", err)
				}
			case <-time.After(30 * time.Second):
				tb.Errorf("relay did not stop")
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// streamMsgs returns every message of the stream in stream order.
func streamMsgs(tb testing.TB, st jetstream.Stream) []*jetstream.RawStreamMsg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		tb.Fatalf("stream info: %v", err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			tb.Fatalf("get msg %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// relayMetrics returns the service's Prometheus relay metrics on reg, so the
// tests read the series /metrics serves.
func relayMetrics(tb testing.TB, reg *prometheus.Registry) events.RelayMetrics {
	tb.Helper()
	m, err := eventsprom.NewRelayMetrics(reg)
	if err != nil {
		tb.Fatalf("relay metrics: %v", err)
	}
	return m
}

// metric returns the value of a counter or gauge (by label value) or the
// sample count of a histogram from reg.
func metric(tb testing.TB, reg *prometheus.Registry, name, labelValue string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != labelValue) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}
