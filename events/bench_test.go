package events_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var syncModes = []struct {
	name       string
	syncAlways bool
}{
	{name: "sync_always", syncAlways: true},
	{name: "default_sync_2m", syncAlways: false},
}

// BenchmarkPublishAck measures one event published and acknowledged at a
// time (the relay's pattern) and, for comparison, 100 in flight with
// PublishAsync, with SyncAlways and with the default 2-minute sync interval.
// The figures are in events/natsserver/doc.go.
func BenchmarkPublishAck(b *testing.B) {
	for _, mode := range syncModes {
		b.Run(mode.name+"/sequential", func(b *testing.B) {
			js := benchJS(b, mode.syncAlways)
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
		b.Run(mode.name+"/async_window_100", func(b *testing.B) {
			js := benchJS(b, mode.syncAlways)
			msgs := benchMsgs(b.N)
			b.ResetTimer()
			futures := make([]jetstream.PubAckFuture, 0, 100)
			wait := func() {
				for _, f := range futures {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Fatal(err)
					}
				}
				futures = futures[:0]
			}
			for i, m := range msgs {
				f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(benchID(i)))
				if err != nil {
					b.Fatal(err)
				}
				if futures = append(futures, f); len(futures) == cap(futures) {
					wait()
				}
			}
			wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkRelay measures the relay end to end: b.N outbox records
// published in order and deleted.
func BenchmarkRelay(b *testing.B) {
	for _, mode := range syncModes {
		b.Run(mode.name, func(b *testing.B) {
			js := benchJS(b, mode.syncAlways)
			out := newFakeOutbox()
			evs := make([]ledger.Event, b.N)
			for i := range evs {
				evs[i] = event(i, "succeeded")
			}
			r, err := events.NewRelay(out, js, events.RelayOptions{Batch: 100})
			if err != nil {
				b.Fatal(err)
			}
			runRelay(b, r)
			b.ResetTimer()
			out.add(evs...)
			testkit.EventuallyWithin(b, 10*time.Minute, "outbox drained", func() bool { return out.len() == 0 })
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func benchJS(b *testing.B, syncAlways bool) jetstream.JetStream {
	b.Helper()
	s := startServer(b, b.TempDir(), "", syncAlways)
	js := connect(b, s.ClientURL())
	ensureStream(b, js)
	return js
}

func benchMsgs(n int) []*nats.Msg {
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		ev := event(i, "succeeded")
		subj, _ := events.Subject("recon", ev)
		body, _ := json.Marshal(ev)
		msgs[i] = &nats.Msg{Subject: subj, Data: body}
	}
	return msgs
}

func benchID(i int) string { return event(i, "succeeded").MsgID() }
