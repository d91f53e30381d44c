package natstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/ledger"
)

// Start starts an embedded server on listen ("" = a random loopback port)
// storing in dir, and shuts it down when the test ends.
func Start(tb testing.TB, dir, listen string, syncAlways bool) *natsserver.Server {
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
	tb.Cleanup(func() { Shutdown(tb, s) })
	return s
}

// Shutdown stops s, failing the test if it does not stop cleanly. A test
// that kills its server half-way calls it itself; Start's cleanup then
// finds it stopped.
func Shutdown(tb testing.TB, s *natsserver.Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		tb.Errorf("shutdown: %v", err)
	}
}

// Connect opens a client that reconnects the way the service's does
// (events.Connect), only faster, and closes it when the test ends.
func Connect(tb testing.TB, url string) jetstream.JetStream {
	tb.Helper()
	nc, js, err := events.Connect(url, nil, nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return js
}

// EnsureStream creates the service's default event stream.
func EnsureStream(tb testing.TB, js jetstream.JetStream) jetstream.Stream {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		tb.Fatalf("ensure stream: %v", err)
	}
	return st
}

// JetStream is Start, Connect and EnsureStream in one: the JetStream of a
// fresh embedded server with the service's default stream.
func JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	js := Connect(tb, Start(tb, tb.TempDir(), "", false).ClientURL())
	EnsureStream(tb, js)
	return js
}

// StreamCount is the stream's message count.
func StreamCount(tb testing.TB, st jetstream.Stream) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		tb.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// BaseTime is when the test events happen: Event i is i seconds after it.
var BaseTime = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// Event returns the i-th test event of run-1 of tenant acme, a webhook's,
// with the given status.
func Event(i int, status string) ledger.Event {
	return ledger.Event{
		Key: fmt.Sprintf("key-%04d", i), Tenant: "acme", RunID: "run-1", Tool: "stripe.payment_intents.create",
		ToolCallID: fmt.Sprintf("call_%d", i), Status: status, ReceiptID: fmt.Sprintf("pi_%d", i),
		Source: ledger.SourceWebhook, VendorEventID: fmt.Sprintf("evt_%d", i), At: BaseTime.Add(time.Duration(i) * time.Second),
	}
}

// Port returns the port of a nats:// URL, so a test can restart a server
// on the port its clients reconnect to.
func Port(tb testing.TB, url string) int {
	tb.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	if err != nil {
		tb.Fatalf("split %q: %v", url, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		tb.Fatalf("port %q: %v", p, err)
	}
	return n
}

// SelfSignedCert writes a certificate for 127.0.0.1, valid for an hour
// either side of now and its own CA, and its key, PEM, into dir, and
// returns their files.
func SelfSignedCert(tb testing.TB, dir string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reconciler test nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "nats-cert.pem"), filepath.Join(dir, "nats-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}
