package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// syncModes are the server's fsync policies the benchmarks compare: every
// write before its ack (SyncAlways), every second (natsserver.DefaultOptions,
// the embedded server's), every 2 minutes (a stock server's default).
var syncModes = []struct {
	name         string
	syncAlways   bool
	syncInterval time.Duration
}{
	{name: "sync_always", syncAlways: true},
	{name: "sync_1s", syncInterval: natsserver.DefaultSyncInterval},
	{name: "default_sync_2m"},
}

// BenchmarkPublishAck measures one event published and acknowledged at a
// time and, for comparison, a window of 256 in flight with
// PublishMsgAsync (what the relay does), under each sync policy. The
// figures are in events/natsserver/doc.go.
func BenchmarkPublishAck(b *testing.B) {
	for _, mode := range syncModes {
		b.Run(mode.name+"/sequential", func(b *testing.B) {
			js := benchJS(b, mode.syncAlways, mode.syncInterval)
			ctx := context.Background()
			msgs := benchMsgs(b.N)
			b.ResetTimer()
			for i, m := range msgs {
				if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(benchID(i))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
		b.Run(mode.name+"/async_window_256", func(b *testing.B) {
			js := benchJS(b, mode.syncAlways, mode.syncInterval)
			msgs := benchMsgs(b.N)
			b.ResetTimer()
			window := make(chan jetstream.PubAckFuture, 256)
			done := make(chan struct{})
			go func() { // owner: this benchmark; exits when window is closed and drained
				defer close(done)
				for f := range window {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Error(err)
					}
				}
			}()
			for i, m := range msgs {
				f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(benchID(i)))
				if err != nil {
					b.Fatal(err)
				}
				window <- f
			}
			close(window)
			<-done
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkRelay measures the relay end to end: b.N outbox records
// published, one at a time (window_1, the relay before the pipeline) and
// with the default window, under each sync policy. The time runs until the
// last PubAck; deletes follow SyncedAfter later and are not timed.
func BenchmarkRelay(b *testing.B) {
	for _, mode := range syncModes {
		for _, window := range []int{1, events.DefaultWindow} {
			b.Run(fmt.Sprintf("%s/window_%d", mode.name, window), func(b *testing.B) {
				js := benchJS(b, mode.syncAlways, mode.syncInterval)
				st := natstest.EnsureStream(b, js)
				out := newFakeOutbox()
				evs := make([]ledger.Event, b.N)
				for i := range evs {
					evs[i] = natstest.Event(i, "succeeded")
				}
				r, err := events.NewRelay(out, js, events.RelayOptions{Window: window})
				if err != nil {
					b.Fatal(err)
				}
				runRelay(b, r)
				b.ResetTimer()
				out.add(evs...)
				testkit.EventuallyWithin(b, 10*time.Minute, "every record published", func() bool { return natstest.StreamCount(b, st) == uint64(b.N) })
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkAwaitWake measures, on the single node as serve runs it (bolt,
// the embedded server with natsserver.DefaultOptions, the relay with
// SyncedAfter 3 s), how long after a resolution's commit returns an Await
// already waiting on its key returns. ns/op is the whole iteration
// (claims, the consumer's set-up); the figures are commit-to-wake p50 and
// p99.
func BenchmarkAwaitWake(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	opts := natsserver.DefaultOptions(filepath.Join(dir, "nats"), nil)
	opts.Listen = "127.0.0.1:-1"
	srv, err := natsserver.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { natstest.Shutdown(b, srv) })
	js := natstest.Connect(b, srv.ClientURL())
	stream := natstest.EnsureStream(b, js)
	r, err := events.NewRelay(st, js, events.RelayOptions{SyncedAfter: 3 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	runRelay(b, r)

	wakes := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-await", Tool: "stripe.payment_intents.create", ToolCallID: fmt.Sprint(i),
			Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent, Intent: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			ReplayWindow: time.Hour,
		}, ledger.DefaultPolicy(), time.Now())
		if err != nil {
			b.Fatal(err)
		}
		res, err := st.Claim(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		key := res.Row.Key
		woke := make(chan time.Time, 1)
		go func() { // owner: this iteration; returns with the event or the benchmark's failure
			if _, err := events.Await(ctx, js, "acme", "run-await", key); err != nil {
				b.Error(err)
			}
			woke <- time.Now()
		}()
		testkit.EventuallyWithin(b, 10*time.Second, "Await's consumer", func() bool { return consumers(b, stream) == 1 })
		if _, _, err := st.Apply(ctx, "acme", key, ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded,
			ReceiptID: "pi_" + key[:8], VendorEventID: fmt.Sprint("evt_", i), At: time.Now()}); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		wakes = append(wakes, (<-woke).Sub(committed))
		testkit.EventuallyWithin(b, 10*time.Second, "Await's consumer deleted", func() bool { return consumers(b, stream) == 0 })
	}
	b.StopTimer()
	slices.Sort(wakes)
	b.ReportMetric(float64(wakes[len(wakes)/2])/1e6, "wake-p50-ms")
	b.ReportMetric(float64(wakes[len(wakes)*99/100])/1e6, "wake-p99-ms")
}

func benchJS(b *testing.B, syncAlways bool, syncInterval time.Duration) jetstream.JetStream {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := natsserver.Start(ctx, natsserver.Options{Listen: "127.0.0.1:-1", StoreDir: b.TempDir(), SyncAlways: syncAlways, SyncInterval: syncInterval})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { natstest.Shutdown(b, s) })
	js := natstest.Connect(b, s.ClientURL())
	natstest.EnsureStream(b, js)
	return js
}

func benchMsgs(n int) []*nats.Msg {
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		ev := natstest.Event(i, "succeeded")
		subj, _ := events.Subject("recon", ev)
		body, _ := json.Marshal(ev)
		msgs[i] = &nats.Msg{Subject: subj, Data: body}
	}
	return msgs
}

func benchID(i int) string { return natstest.Event(i, "succeeded").MsgID() }
