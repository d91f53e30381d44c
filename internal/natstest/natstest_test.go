package natstest_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"testing"

	"github.com/agentledger/reconciler/internal/natstest"
)

func TestServerStreamAndPort(t *testing.T) {
	s := natstest.Start(t, t.TempDir(), "", false)
	js := natstest.Connect(t, s.ClientURL())
	st := natstest.EnsureStream(t, js)
	if _, err := js.Publish(t.Context(), "recon.acme.run-1.succeeded", []byte("{}")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if n := natstest.StreamCount(t, st); n != 1 {
		t.Fatalf("stream count = %d, want 1", n)
	}
	p := natstest.Port(t, s.ClientURL())
	if want := fmt.Sprintf("nats://127.0.0.1:%d", p); s.ClientURL() != want {
		t.Fatalf("Port(%s) = %d", s.ClientURL(), p)
	}
}

func TestSelfSignedCertVerifiesFor127(t *testing.T) {
	certFile, keyFile := natstest.SelfSignedCert(t, t.TempDir())
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("load pair: %v", err)
	}
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatal("certificate file holds no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("verify as its own CA for 127.0.0.1: %v", err)
	}
}
