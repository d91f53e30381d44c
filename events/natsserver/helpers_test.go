package natsserver_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// connect opens a reconnecting client the way the service does and closes
// it when the test ends.
func connect(tb testing.TB, url string) jetstream.JetStream {
	tb.Helper()
	nc, js, err := events.Connect(url, nil, nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return js
}

// ensureStream creates the service's default stream.
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
