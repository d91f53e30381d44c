package webhooks

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fuzz verifier's allow-list, and an independent statement of it: a
// regular expression over the raw string, no net/url involved.
var (
	paypalFuzzPrefixes = []string{
		"https://api.paypal.com/",
		"https://api.sandbox.paypal.com/",
		"https://127.0.0.1:8443/v1/notifications/certs/",
	}
	paypalFuzzAllowed = regexp.MustCompile(
		`^(?i:https://(?:api\.paypal\.com|api\.sandbox\.paypal\.com|127\.0\.0\.1:8443))` +
			`/v1/notifications/certs/[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$`)
)

// offlineTransport refuses every request and records where it would have gone.
type offlineTransport struct {
	mu   sync.Mutex
	urls []string
}

func (o *offlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	o.mu.Lock()
	o.urls = append(o.urls, r.URL.String())
	o.mu.Unlock()
	return nil, errors.New("offline")
}

func newPayPalFuzzVerifier(tb testing.TB) (*PayPalVerifier, *offlineTransport) {
	tr := &offlineTransport{}
	v, err := NewPayPalVerifier(PayPalEndpoint{
		Name: "fuzz", WebhookID: paypalTestWebhook, CertURLPrefixes: paypalFuzzPrefixes, CertCNSuffix: paypalTestSuffix,
	}, PayPalOptions{
		HTTPClient: &http.Client{Transport: tr},
		Now:        func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		tb.Fatal(err)
	}
	return v, tr
}

func FuzzPayPalCertURL(f *testing.F) {
	for _, s := range []string{
		"https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-df8cd2d5",
		"https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77",
		"https://127.0.0.1:8443/v1/notifications/certs/leaf",
		"HTTPS://API.PAYPAL.COM/v1/notifications/certs/x",
		"https://api.paypal.com.evil.test/v1/notifications/certs/x",
		"https://api.paypal.com@evil.test/v1/notifications/certs/x",
		"https://evil.test#@api.paypal.com/v1/notifications/certs/x",
		"https://api.paypal.com:443/v1/notifications/certs/x",
		"https://127.0.0.1:8443/v1/notifications/certs/../../x",
		"https://127.0.0.1:8443/v1/notifications/certs/%2e%2e",
		"https://[::ffff:127.0.0.1]:8443/v1/notifications/certs/x",
		"https://api.paypal.com/v1/notifications/certs/x/",
		"http://api.paypal.com/v1/notifications/certs/x",
	} {
		f.Add(s)
	}
	v, _ := newPayPalFuzzVerifier(f)
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := v.checkCertURL(raw)
		indep := paypalFuzzAllowed.MatchString(raw)
		if err == nil && !indep {
			t.Fatalf("checkCertURL accepted %q, outside the allow-list", raw)
		}
		if err != nil && indep {
			t.Fatalf("checkCertURL refused %q, a plain allowed URL: %v", raw, err)
		}
		if err == nil {
			// What would be dialled is the host we checked.
			host := strings.ToLower(u.Host)
			if host != "api.paypal.com" && host != "api.sandbox.paypal.com" && host != "127.0.0.1:8443" {
				t.Fatalf("checkCertURL(%q) would dial %q", raw, u.Host)
			}
		}
	})
}

func FuzzPayPalHeaders(f *testing.F) {
	f.Add("69cd13f0-d67a-11e5-baa3-778b53f4ae55", "2026-03-01T11:59:00Z", "bG9yZW0gaXBzdW0=",
		"https://api.paypal.com/v1/notifications/certs/CERT-1", "SHA256withRSA")
	f.Add("id|x", "2026-03-01T11:59:00.123+01:00", "bG9yZW0", "https://api.paypal.com.evil.test/v1/notifications/certs/x", "SHA1withRSA")
	f.Add("", "", "", "", "")
	f.Add("a", "not a time", "***", "http://127.0.0.1:8443/v1/notifications/certs/x", "sha256withrsa")
	v, tr := newPayPalFuzzVerifier(f)
	body := []byte(`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}`)
	f.Fuzz(func(t *testing.T, id, ts, sig, certURL, algo string) {
		h := http.Header{}
		for name, val := range map[string]string{
			PayPalHeaderTransmissionID: id, PayPalHeaderTransmissionTime: ts, PayPalHeaderTransmissionSig: sig,
			PayPalHeaderCertURL: certURL, PayPalHeaderAuthAlgo: algo,
		} {
			if val != "" {
				h.Set(name, val)
			}
		}
		hd, err := parsePayPalHeaders(h)
		if err != nil {
			if !errors.Is(err, ErrUnparsable) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("parse error %v wraps no sentinel", err)
			}
		} else {
			if strings.ContainsAny(hd.transmissionID, "|\r\n ") || hd.transmissionID == "" || len(hd.transmissionID) > maxPayPalTransmissionID {
				t.Fatalf("accepted transmission id %q", hd.transmissionID)
			}
			if at, perr := time.Parse(time.RFC3339Nano, hd.transmissionTime); perr != nil || !at.Equal(hd.at) {
				t.Fatalf("accepted transmission time %q (%v)", hd.transmissionTime, perr)
			}
			if len(hd.sig) == 0 || hd.authAlgo != "SHA256withRSA" || hd.certURL != certURL {
				t.Fatalf("accepted headers %+v", hd)
			}
		}

		tr.mu.Lock()
		before := len(tr.urls)
		tr.mu.Unlock()
		verr := v.Verify(context.Background(), h, body)
		if verr == nil {
			t.Fatal("Verify succeeded without any reachable certificate")
		}
		if !errors.Is(verr, ErrUnparsable) && !errors.Is(verr, ErrBadSignature) && !errors.Is(verr, ErrStale) && !errors.Is(verr, ErrUpstream) {
			t.Fatalf("Verify error %v wraps no sentinel", verr)
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, u := range tr.urls[before:] {
			if !paypalFuzzAllowed.MatchString(u) {
				t.Fatalf("Verify fetched %q, outside the allow-list", u)
			}
		}
	})
}

func FuzzDecodePayPal(f *testing.F) {
	for _, name := range []string{"payment_capture_completed.json", "payment_capture_denied.json", "checkout_order_completed.json"} {
		f.Add(readPayPalFixture(f, name))
	}
	f.Add([]byte(`{"id":"WH-1","event_type":"X","resource":{"amount":{"currency_code":"JPY","value":"-.5"}}}`))
	f.Add([]byte(`{"id":"WH-1","event_type":"X","resource":{"purchase_units":[{"invoice_id":"i","amount":{"total":"1","currency":"EUR"}}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := DecodePayPal(body)
		if err != nil {
			if !errors.Is(err, ErrUnparsable) {
				t.Fatalf("error %v does not wrap ErrUnparsable", err)
			}
			return
		}
		if ev.Vendor != "paypal" || ev.ID == "" || ev.Type == "" {
			t.Fatalf("decoded %+v", ev)
		}
		if ev.Amount != nil {
			if len(ev.Currency) != 3 || strings.ToLower(ev.Currency) != ev.Currency {
				t.Fatalf("amount %d with currency %q", *ev.Amount, ev.Currency)
			}
		}
	})
}
