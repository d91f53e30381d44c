package events_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/eventsprom"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// startServer starts an embedded server on listen ("" = random port) storing
// in dir, and shuts it down when the test ends.
func startServer(tb testing.TB, dir, listen string, syncAlways bool) *natsserver.Server {
	tb.Helper()
	if listen == "" {
		listen = "127.0.0.1:-1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := natsserver.Start(ctx, natsserver.Options{Listen: listen, StoreDir: dir, SyncAlways: syncAlways})
	if err != nil {
		tb.Fatalf("start server: %v", err)
	}
	tb.Cleanup(func() { shutdown(tb, s) })
	return s
}

func shutdown(tb testing.TB, s *natsserver.Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		tb.Errorf("shutdown: %v", err)
	}
}

// connect opens a reconnecting client and closes it when the test ends.
func connect(tb testing.TB, url string) jetstream.JetStream {
	tb.Helper()
	nc, js, err := events.Connect(url, nil, nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return js
}

// ensureStream creates the default stream.
func ensureStream(tb testing.TB, js jetstream.JetStream) jetstream.Stream {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		tb.Fatalf("ensure stream: %v", err)
	}
	return st
}

// port returns the port of a nats:// URL.
func port(tb testing.TB, url string) int {
	tb.Helper()
	_, p, err := net.SplitHostPort(url[len("nats://"):])
	if err != nil {
		tb.Fatalf("split %q: %v", url, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		tb.Fatalf("port %q: %v", p, err)
	}
	return n
}

var baseTime = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// event returns the i-th test event of run-1.
func event(i int, status string) ledger.Event {
	return ledger.Event{
		Key: fmt.Sprintf("key-%04d", i), Tenant: "acme", RunID: "run-1", Tool: "stripe.payment_intents.create",
		ToolCallID: fmt.Sprintf("call_%d", i), Status: status, ReceiptID: fmt.Sprintf("pi_%d", i),
		Source: ledger.SourceWebhook, VendorEventID: fmt.Sprintf("evt_%d", i), At: baseTime.Add(time.Duration(i) * time.Second),
	}
}

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

// streamCount is the stream's message count.
func streamCount(tb testing.TB, st jetstream.Stream) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		tb.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
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
