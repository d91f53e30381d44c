package webhooks_test

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/webhooks"
)

// A PayPal delivery signed with the test PKI, verified offline against a
// local certificate host, then decoded.
func ExampleNewPayPalVerifier() {
	read := func(name string) []byte {
		b, err := os.ReadFile("../fixtures/paypal/" + name)
		if err != nil {
			panic(err)
		}
		return b
	}
	chain := read("certs/leaf-chain.pem")
	keyBlock, _ := pem.Decode(read("certs/leaf.key"))
	k, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		panic(err)
	}
	rootBlock, _ := pem.Decode(read("certs/root.pem"))
	root, _ := x509.ParseCertificate(rootBlock.Bytes)
	leafBlock, _ := pem.Decode(chain)
	leaf, _ := x509.ParseCertificate(leafBlock.Bytes)

	// The certificate host: in production PayPal's, here a local TLS server.
	certs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(chain) }))
	defer certs.Close()
	roots := x509.NewCertPool()
	roots.AddCert(root)                // trusts the signing chain
	roots.AddCert(certs.Certificate()) // and the TLS connection

	now := leaf.NotBefore.Add(24 * time.Hour)
	v, err := webhooks.NewPayPalVerifier(webhooks.PayPalEndpoint{
		Name:            "default",
		Tenant:          "acme",
		WebhookID:       "WH-TEST-0001",
		CertURLPrefixes: []string{certs.URL + "/"},
		CertCNSuffix:    ".test.paypal.example",
		RootCAs:         roots,
	}, webhooks.PayPalOptions{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	defer v.Close()

	body := read("payment_capture_completed.json")
	h, err := fixtures.SignPayPal(k.(*rsa.PrivateKey), certs.URL+"/v1/notifications/certs/CERT-test",
		"WH-TEST-0001", "8f3c8f10-d67a-11e5-baa3-778b53f4ae55", now, body)
	if err != nil {
		panic(err)
	}
	if err := v.Verify(context.Background(), h, body); err != nil {
		panic(err)
	}
	ev, err := webhooks.DecodePayPal(body)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Type, ev.ObjectID, ev.LocalID, *ev.Amount, ev.Currency)
	// Output: PAYMENT.CAPTURE.COMPLETED 2GG279541U471931P rl_PLACEHOLDER_LOCAL_ID 1050 usd
}
