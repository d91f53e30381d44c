package webhooks

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/testkit"
)

// Test PKI from scripts/gen-paypal-certs.sh, committed under fixtures/paypal/certs.
const (
	paypalFixtureDir  = "../fixtures/paypal"
	paypalTestSuffix  = ".test.paypal.example"
	paypalTestWebhook = "WH-TEST-0001"
)

type paypalPKI struct {
	root   *x509.Certificate
	leaf   *x509.Certificate
	chains map[string][]byte          // leaf, expired, wrongcn, untrusted
	keys   map[string]*rsa.PrivateKey // same names
}

func loadPayPalPKI(t testing.TB) *paypalPKI {
	t.Helper()
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(paypalFixtureDir, "certs", name))
		if err != nil {
			t.Fatalf("read fixture: %v", err)
		}
		return b
	}
	p := &paypalPKI{chains: map[string][]byte{}, keys: map[string]*rsa.PrivateKey{}}
	p.root = paypalParseCert(t, read("root.pem"))
	p.leaf = paypalParseCert(t, read("leaf.pem"))
	for _, n := range []string{"leaf", "expired", "wrongcn", "untrusted"} {
		p.chains[n] = read(n + "-chain.pem")
		p.keys[n] = paypalParseKey(t, read(n+".key"))
	}
	return p
}

func paypalParseCert(t testing.TB, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parse cert: %v", err)
	}
	return c
}

func paypalParseKey(t testing.TB, b []byte) *rsa.PrivateKey {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM key block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf("parse key: %v", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		t.Fatalf("key is %T", k)
	}
	return rk
}

func readPayPalFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(paypalFixtureDir, name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return b
}

// paypalCertServer is a fake PayPal certificate host. The last path segment
// picks the behaviour; every request is counted per path.
type paypalCertServer struct {
	*httptest.Server
	pki     *paypalPKI
	gate    chan struct{} // "gated-*" paths block until it is closed
	release chan struct{} // closed when the test ends: "slow" never answers before

	mu   sync.Mutex
	hits map[string]int
}

func newPayPalCertServer(t testing.TB, pki *paypalPKI) *paypalCertServer {
	s := &paypalCertServer{pki: pki, gate: make(chan struct{}), release: make(chan struct{}), hits: map[string]int{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release) }) // runs first: Close waits for "slow" handlers
	return s
}

func (s *paypalCertServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits[r.URL.Path]++
	s.mu.Unlock()
	name, ok := strings.CutPrefix(r.URL.Path, paypalCertPath)
	if !ok {
		http.NotFound(w, r)
		return
	}
	for _, chain := range []string{"leaf", "expired", "wrongcn", "untrusted"} {
		if strings.HasPrefix(name, chain) {
			_, _ = w.Write(s.pki.chains[chain])
			return
		}
	}
	switch {
	case strings.HasPrefix(name, "gated"):
		select {
		case <-s.gate:
			_, _ = w.Write(s.pki.chains["leaf"])
		case <-r.Context().Done():
		}
	case name == "redirect":
		http.Redirect(w, r, paypalCertPath+"leaf-after-redirect", http.StatusFound)
	case name == "slow":
		// Blocks past the client giving up, and then returns without an
		// answer: a handler that returned on r.Context().Done() wrote an
		// empty 200, which the client could still read as the deadline
		// fired — a bad signature instead of a timeout.
		<-s.release
		panic(http.ErrAbortHandler)
	case name == "huge-length":
		body := bytes.Repeat([]byte("A"), DefaultPayPalMaxCertBytes+1)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body)
	case name == "huge-chunked":
		// A valid chain followed by padding, streamed without a length: the
		// cap must hold even when the server does not announce the size.
		_, _ = w.Write(s.pki.chains["leaf"])
		w.(http.Flusher).Flush()
		_, _ = w.Write(bytes.Repeat([]byte("\n"), DefaultPayPalMaxCertBytes))
	case name == "notpem":
		_, _ = w.Write([]byte("hello, this is not a certificate\n"))
	case name == "status500":
		http.Error(w, "boom", http.StatusInternalServerError)
	case name == "status429":
		http.Error(w, "slow down", http.StatusTooManyRequests)
	default:
		http.NotFound(w, r)
	}
}

func (s *paypalCertServer) hitsFor(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

func (s *paypalCertServer) totalHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.hits {
		n += h
	}
	return n
}

type paypalEnv struct {
	pki   *paypalPKI
	srv   *paypalCertServer
	clock *testkit.Clock
	ep    PayPalEndpoint
	opts  PayPalOptions
	v     *PayPalVerifier
}

// newPayPalEnv starts a fake cert host and an offline verifier trusting the
// test root and the host's TLS certificate. The clock sits 30 days into the
// leaf's validity, so the 1-day "expired" leaf is expired and nothing
// depends on the wall clock.
func newPayPalEnv(t testing.TB, mutate func(*PayPalEndpoint, *PayPalOptions)) *paypalEnv {
	t.Helper()
	pki := loadPayPalPKI(t)
	srv := newPayPalCertServer(t, pki)
	roots := x509.NewCertPool()
	roots.AddCert(pki.root)
	roots.AddCert(srv.Certificate())
	e := &paypalEnv{pki: pki, srv: srv, clock: testkit.NewClock(pki.leaf.NotBefore.Add(30 * 24 * time.Hour))}
	e.ep = PayPalEndpoint{
		Name:            "default",
		Tenant:          "acme",
		WebhookID:       paypalTestWebhook,
		CertURLPrefixes: []string{srv.URL + "/", "https://api.paypal.com/"},
		CertCNSuffix:    paypalTestSuffix,
		RootCAs:         roots,
	}
	e.opts = PayPalOptions{Now: e.clock.Now, Timeout: 10 * time.Second}
	if mutate != nil {
		mutate(&e.ep, &e.opts)
	}
	v, err := NewPayPalVerifier(e.ep, e.opts)
	if err != nil {
		t.Fatalf("NewPayPalVerifier: %v", err)
	}
	t.Cleanup(v.Close)
	e.v = v
	return e
}

func (e *paypalEnv) certURL(name string) string { return e.srv.URL + paypalCertPath + name }

// sign signs body with the named key, pointing at the named cert path.
func (e *paypalEnv) sign(t testing.TB, key, cert, webhookID string, at time.Time, body []byte) http.Header {
	t.Helper()
	h, err := fixtures.SignPayPal(e.pki.keys[key], e.certURL(cert), webhookID, "8f3c8f10-d67a-11e5-baa3-778b53f4ae55", at, body)
	if err != nil {
		t.Fatalf("SignPayPal: %v", err)
	}
	return h
}

func paypalCheckErr(t testing.TB, got, want error) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Fatalf("got error %v, want nil", got)
	case want != nil && !errors.Is(got, want):
		t.Fatalf("got error %v, want one wrapping %v", got, want)
	}
}

func TestPayPalMessage(t *testing.T) {
	// 123456789 is the CRC-32 check input: 0xCBF43926, which is negative as
	// an int32 — the case signed CRC libraries get wrong.
	got := string(paypalMessage("tid", "2016-02-18T20:01:35Z", "WH-1", []byte("123456789")))
	want := "tid|2016-02-18T20:01:35Z|WH-1|3421780262"
	if got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
}

// paypalHighCRCBody returns a fixture body whose CRC32 has the top bit set, so
// its signed and unsigned renderings differ.
func paypalHighCRCBody(t testing.TB) []byte {
	body := readPayPalFixture(t, "payment_capture_completed.json")
	for i := 0; i < 64; i++ {
		if crc32.ChecksumIEEE(body) >= 1<<31 {
			return body
		}
		body = append(body, ' ')
	}
	t.Fatal("no body with a high CRC bit")
	return nil
}

func TestPayPalVerifyOffline(t *testing.T) {
	body := paypalHighCRCBody(t)
	tests := []struct {
		name string
		// prepare returns the headers and body to verify.
		prepare func(t *testing.T, e *paypalEnv) (http.Header, []byte)
		want    error
		fetches int
	}{
		{
			name: "valid",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now().Add(-time.Minute), body), body
			},
			fetches: 1,
		},
		{
			name: "lower-case header names",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
				raw := http.Header{}
				for k, vs := range h {
					raw[strings.ToLower(k)] = vs // as a proxy might forward them, then re-canonicalised by net/http
				}
				out := http.Header{}
				for k, vs := range raw {
					for _, v := range vs {
						out.Add(k, v)
					}
				}
				return out, body
			},
			fetches: 1,
		},
		{
			name: "tampered body",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
				return h, bytes.Replace(body, []byte(`"10.50"`), []byte(`"10.51"`), 1)
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "signed for another webhook id",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "leaf", "leaf", "WH-SOMEONE-ELSE", e.clock.Now(), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "crc signed as a signed int",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
				msg := fmt.Sprintf("%s|%s|%s|%d", h.Get(PayPalHeaderTransmissionID), h.Get(PayPalHeaderTransmissionTime),
					paypalTestWebhook, int32(crc32.ChecksumIEEE(body)))
				if !strings.Contains(msg, "|-") {
					t.Fatalf("message %q has no negative CRC", msg)
				}
				digest := sha256.Sum256([]byte(msg))
				sig, err := rsa.SignPKCS1v15(rand.Reader, e.pki.keys["leaf"], crypto.SHA256, digest[:])
				if err != nil {
					t.Fatal(err)
				}
				h.Set(PayPalHeaderTransmissionSig, base64.StdEncoding.EncodeToString(sig))
				return h, body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "signed with a key that is not the cert's",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "wrongcn", "leaf", paypalTestWebhook, e.clock.Now(), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "SHA1withRSA refused before any fetch",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
				h.Set(PayPalHeaderAuthAlgo, "SHA1withRSA")
				return h, body
			},
			want: ErrBadSignature,
		},
		{
			name: "expired cert",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "expired", "expired", paypalTestWebhook, e.clock.Now(), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "cert not yet valid",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				e.clock.Set(e.pki.leaf.NotBefore.Add(-time.Hour))
				return e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "cert name contains but does not end with the suffix",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "wrongcn", "wrongcn", paypalTestWebhook, e.clock.Now(), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "cert from an untrusted root",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "untrusted", "untrusted", paypalTestWebhook, e.clock.Now(), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
		{
			name: "transmission time 95h old is a retry, accepted",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now().Add(-95*time.Hour), body), body
			},
			fetches: 1,
		},
		{
			name: "transmission time 97h old is stale",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now().Add(-97*time.Hour), body), body
			},
			want:    ErrStale,
			fetches: 1,
		},
		{
			name: "transmission time 4m ahead is skew, accepted",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now().Add(4*time.Minute), body), body
			},
			fetches: 1,
		},
		{
			name: "transmission time 10m ahead is refused",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now().Add(10*time.Minute), body), body
			},
			want:    ErrStale,
			fetches: 1,
		},
		{
			name: "stale and forged is a bad signature, not stale",
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				return e.sign(t, "wrongcn", "leaf", paypalTestWebhook, e.clock.Now().Add(-200*time.Hour), body), body
			},
			want:    ErrBadSignature,
			fetches: 1,
		},
	}
	for _, name := range []string{PayPalHeaderTransmissionID, PayPalHeaderTransmissionTime,
		PayPalHeaderTransmissionSig, PayPalHeaderCertURL, PayPalHeaderAuthAlgo} {
		tests = append(tests, struct {
			name    string
			prepare func(t *testing.T, e *paypalEnv) (http.Header, []byte)
			want    error
			fetches int
		}{
			name: "missing " + name,
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
				h.Del(name)
				return h, body
			},
			want: ErrUnparsable,
		})
	}
	headerCases := []struct {
		name  string
		edit  func(h http.Header)
		wantE error
	}{
		{"signature not base64", func(h http.Header) { h.Set(PayPalHeaderTransmissionSig, "***") }, ErrUnparsable},
		{"time not RFC 3339", func(h http.Header) { h.Set(PayPalHeaderTransmissionTime, "Thu, 18 Feb 2016 20:01:35 GMT") }, ErrUnparsable},
		{"time header given twice", func(h http.Header) { h.Add(PayPalHeaderTransmissionTime, "2016-02-18T20:01:35Z") }, ErrUnparsable},
		{"transmission id with a separator", func(h http.Header) { h.Set(PayPalHeaderTransmissionID, "a|b") }, ErrUnparsable},
		{"transmission id too long", func(h http.Header) { h.Set(PayPalHeaderTransmissionID, strings.Repeat("a", 200)) }, ErrUnparsable},
	}
	for _, hc := range headerCases {
		tests = append(tests, struct {
			name    string
			prepare func(t *testing.T, e *paypalEnv) (http.Header, []byte)
			want    error
			fetches int
		}{
			name: hc.name,
			prepare: func(t *testing.T, e *paypalEnv) (http.Header, []byte) {
				h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
				hc.edit(h)
				return h, body
			},
			want: hc.wantE,
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPayPalEnv(t, nil)
			h, b := tt.prepare(t, e)
			err := e.v.Verify(context.Background(), h, b)
			paypalCheckErr(t, err, tt.want)
			if got := e.srv.totalHits(); got != tt.fetches {
				t.Errorf("cert fetches = %d, want %d", got, tt.fetches)
			}
		})
	}
}

func TestSignPayPalRoundTrip(t *testing.T) {
	// The headers SignPayPal produces are what send-fixture puts on the wire.
	e := newPayPalEnv(t, nil)
	body := readPayPalFixture(t, "checkout_order_completed.json")
	// A non-UTC, sub-second time: the header must still be RFC 3339 UTC seconds.
	at := e.clock.Now().Add(-time.Minute).Truncate(time.Second).Add(123 * time.Millisecond).In(time.FixedZone("CEST", 2*3600))
	h := e.sign(t, "leaf", "leaf", paypalTestWebhook, at, body)
	if got, want := h.Get(PayPalHeaderTransmissionTime), at.UTC().Truncate(time.Second).Format("2006-01-02T15:04:05Z"); got != want {
		t.Errorf("transmission time = %q, want %q", got, want)
	}
	if got := h.Get(PayPalHeaderAuthAlgo); got != "SHA256withRSA" {
		t.Errorf("auth algo = %q", got)
	}
	if err := e.v.Verify(context.Background(), h, body); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if _, err := fixtures.SignPayPal(nil, "", "", "", at, body); err == nil {
		t.Error("SignPayPal(nil key) succeeded")
	}
}

func TestNewPayPalVerifierConfig(t *testing.T) {
	ok := PayPalEndpoint{Name: "p", WebhookID: "WH-1", CertURLPrefixes: []string{"https://api.paypal.com/"}}
	post := PayPalEndpoint{Name: "p", WebhookID: "WH-1", Verify: "postback", APIBase: "https://api-m.paypal.com",
		ClientID: "id", ClientSecret: "secret"}
	tests := []struct {
		name    string
		edit    func(*PayPalEndpoint)
		base    PayPalEndpoint
		wantErr string
	}{
		{name: "offline ok", base: ok},
		{name: "postback ok", base: post},
		{name: "postback on loopback http", base: post, edit: func(e *PayPalEndpoint) { e.APIBase = "http://127.0.0.1:9/" }},
		{name: "no webhook id", base: ok, edit: func(e *PayPalEndpoint) { e.WebhookID = "" }, wantErr: "webhook_id"},
		{name: "unknown mode", base: ok, edit: func(e *PayPalEndpoint) { e.Verify = "trust-me" }, wantErr: "verify must be"},
		{name: "offline without prefixes", base: ok, edit: func(e *PayPalEndpoint) { e.CertURLPrefixes = nil }, wantErr: "cert_url_prefixes"},
		{name: "http prefix", base: ok, edit: func(e *PayPalEndpoint) { e.CertURLPrefixes = []string{"http://api.paypal.com/"} }, wantErr: "prefix"},
		{name: "prefix with userinfo", base: ok, edit: func(e *PayPalEndpoint) { e.CertURLPrefixes = []string{"https://u@api.paypal.com/"} }, wantErr: "prefix"},
		{name: "prefix elsewhere", base: ok, edit: func(e *PayPalEndpoint) { e.CertURLPrefixes = []string{"https://api.paypal.com/v2/"} }, wantErr: "path"},
		{name: "postback without api base", base: post, edit: func(e *PayPalEndpoint) { e.APIBase = "" }, wantErr: "api_base"},
		{name: "postback over plain http", base: post, edit: func(e *PayPalEndpoint) { e.APIBase = "http://api-m.paypal.com" }, wantErr: "https"},
		{name: "postback without secret", base: post, edit: func(e *PayPalEndpoint) { e.ClientSecret = "" }, wantErr: "client_secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := tt.base
			if tt.edit != nil {
				tt.edit(&ep)
			}
			v, err := NewPayPalVerifier(ep, PayPalOptions{})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewPayPalVerifier: %v", err)
				}
				v.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}
