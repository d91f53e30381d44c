package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/testkit"
)

func TestPayPalCertURLAllowList(t *testing.T) {
	e := newPayPalEnv(t, func(ep *PayPalEndpoint, _ *PayPalOptions) {
		ep.CertURLPrefixes = append(ep.CertURLPrefixes, "https://api.sandbox.paypal.com/v1/notifications/certs/")
	})
	local := strings.TrimPrefix(e.srv.URL, "https://") // 127.0.0.1:port
	tests := []struct {
		name string
		url  string
		ok   bool
	}{
		{"paypal live", "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-df8cd2d5", true},
		{"paypal sandbox", "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77", true},
		{"host case-insensitive", "https://API.PayPal.com/v1/notifications/certs/CERT-1", true},
		{"test server", "https://" + local + "/v1/notifications/certs/CERT-1", true},
		{"http scheme", "http://api.paypal.com/v1/notifications/certs/CERT-1", false},
		{"no scheme", "//api.paypal.com/v1/notifications/certs/CERT-1", false},
		{"other host", "https://api.stripe.com/v1/notifications/certs/CERT-1", false},
		{"suffix trick", "https://api.paypal.com.evil.test/v1/notifications/certs/CERT-1", false},
		{"prefix trick", "https://evilapi.paypal.com/v1/notifications/certs/CERT-1", false},
		{"trailing dot host", "https://api.paypal.com./v1/notifications/certs/CERT-1", false},
		{"userinfo", "https://api.paypal.com@evil.test/v1/notifications/certs/CERT-1", false},
		{"userinfo with allowed host after", "https://evil.test@api.paypal.com/v1/notifications/certs/CERT-1", false},
		{"port not in prefix", "https://api.paypal.com:8443/v1/notifications/certs/CERT-1", false},
		{"explicit 443 not in prefix", "https://api.paypal.com:443/v1/notifications/certs/CERT-1", false},
		{"test server other port", "https://127.0.0.1:1/v1/notifications/certs/CERT-1", false},
		{"ip literal not in prefix", "https://127.0.0.2" + local[len("127.0.0.1"):] + "/v1/notifications/certs/CERT-1", false},
		{"ipv6 literal", "https://[::1]/v1/notifications/certs/CERT-1", false},
		{"wrong path", "https://api.paypal.com/v1/oauth2/token", false},
		{"cert path without id", "https://api.paypal.com/v1/notifications/certs/", false},
		{"second segment", "https://api.paypal.com/v1/notifications/certs/a/b", false},
		{"path traversal", "https://api.paypal.com/v1/notifications/certs/../../oauth2/token", false},
		{"dot-dot segment", "https://api.paypal.com/v1/notifications/certs/..", false},
		{"dot segment", "https://api.paypal.com/v1/notifications/certs/.", false},
		{"encoded slash", "https://api.paypal.com/v1/notifications/certs/..%2f..%2foauth2", false},
		{"encoded dot", "https://api.paypal.com/v1/notifications/certs/%2e%2e", false},
		{"backslash", "https://api.paypal.com\\@evil.test/v1/notifications/certs/CERT-1", false},
		{"query", "https://api.paypal.com/v1/notifications/certs/CERT-1?x=1", false},
		{"empty query", "https://api.paypal.com/v1/notifications/certs/CERT-1?", false},
		{"fragment", "https://api.paypal.com/v1/notifications/certs/CERT-1#x", false},
		{"sandbox prefix path mismatch", "https://api.sandbox.paypal.com/v1/notifications/certsX/CERT-1", false},
		{"space", "https://api.paypal.com/v1/notifications/certs/CERT 1", false},
		{"newline", "https://api.paypal.com/v1/notifications/certs/CERT-1\n", false},
		{"non-ascii host", "https://аpi.paypal.com/v1/notifications/certs/CERT-1", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.v.checkCertURL(tt.url)
			if got := err == nil; got != tt.ok {
				t.Fatalf("checkCertURL(%q) allowed = %v (%v), want %v", tt.url, got, err, tt.ok)
			}
		})
	}
}

// TestPayPalCertURLRejectedBeforeFetch drives refused URLs through Verify and
// checks the fake host never saw a request, however the signature looks.
func TestPayPalCertURLRejectedBeforeFetch(t *testing.T) {
	e := newPayPalEnv(t, nil)
	body := readPayPalFixture(t, "payment_capture_completed.json")
	local := e.srv.URL
	for _, u := range []string{
		strings.Replace(local, "https://", "http://", 1) + paypalCertPath + "leaf",
		strings.Replace(local, "127.0.0.1", "localhost", 1) + paypalCertPath + "leaf",
		local + "/v1/notifications/leaf",
		local + paypalCertPath + "..%2fleaf",
		strings.Replace(local, "https://", "https://user:pw@", 1) + paypalCertPath + "leaf",
	} {
		t.Run(u, func(t *testing.T) {
			h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
			h.Set(PayPalHeaderCertURL, u)
			paypalCheckErr(t, e.v.Verify(context.Background(), h, body), ErrBadSignature)
			if n := e.srv.totalHits(); n != 0 {
				t.Fatalf("fake host saw %d requests, want 0", n)
			}
		})
	}
}

func TestPayPalCertFetch(t *testing.T) {
	body := readPayPalFixture(t, "payment_capture_completed.json")
	tests := []struct {
		name    string
		cert    string
		opts    func(*PayPalOptions)
		want    error
		hits    map[string]int
		notWant error
	}{
		{name: "ok", cert: "leaf"},
		{name: "redirect is not followed", cert: "redirect", want: ErrBadSignature,
			hits: map[string]int{paypalCertPath + "redirect": 1, paypalCertPath + "leaf-after-redirect": 0}},
		// The server never answers while the test runs, so only the
		// verifier's timeout can end the fetch (see the backstop below).
		{name: "slow server times out as upstream", cert: "slow", want: ErrUpstream, notWant: ErrBadSignature,
			opts: func(o *PayPalOptions) { o.Timeout = 500 * time.Millisecond }},
		{name: "oversized with content-length", cert: "huge-length", want: ErrBadSignature},
		{name: "oversized streamed", cert: "huge-chunked", want: ErrBadSignature},
		{name: "small cap refuses a normal chain", cert: "leaf", want: ErrBadSignature,
			opts: func(o *PayPalOptions) { o.MaxCertBytes = 1024 }},
		{name: "not PEM", cert: "notpem", want: ErrBadSignature},
		{name: "404 is a bad signature", cert: "nosuchcert", want: ErrBadSignature, notWant: ErrUpstream},
		{name: "500 is upstream", cert: "status500", want: ErrUpstream, notWant: ErrBadSignature},
		{name: "429 is upstream", cert: "status429", want: ErrUpstream, notWant: ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPayPalEnv(t, func(_ *PayPalEndpoint, o *PayPalOptions) {
				if tt.opts != nil {
					tt.opts(o)
				}
			})
			h := e.sign(t, "leaf", tt.cert, paypalTestWebhook, e.clock.Now(), body)
			// A backstop far beyond any case's verifier timeout: if it is
			// what ended Verify, the verifier's own timeout did not work.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err := e.v.Verify(ctx, h, body)
			if ctx.Err() != nil {
				t.Fatalf("Verify returned %v only when the test's backstop context ended", err)
			}
			paypalCheckErr(t, err, tt.want)
			if tt.notWant != nil && errors.Is(err, tt.notWant) {
				t.Fatalf("error %v also claims %v", err, tt.notWant)
			}
			for path, want := range tt.hits {
				if got := e.srv.hitsFor(path); got != want {
					t.Errorf("hits on %s = %d, want %d", path, got, want)
				}
			}
			if tt.want != nil && e.v.certs.len() != 0 {
				t.Errorf("a failed fetch was cached")
			}
		})
	}
}

func TestPayPalCertCallerClientNeverRedirects(t *testing.T) {
	// A caller's client that follows redirects (http.Client's default) is
	// used as a copy with redirects off; the caller's own client is untouched.
	pki := loadPayPalPKI(t)
	srv := newPayPalCertServer(t, pki)
	client := srv.Client()
	e := newPayPalEnv(t, func(ep *PayPalEndpoint, o *PayPalOptions) {
		ep.CertURLPrefixes = []string{srv.URL + "/"}
		o.HTTPClient = client
	})
	body := readPayPalFixture(t, "payment_capture_completed.json")
	h, err := fixtures.SignPayPal(pki.keys["leaf"], srv.URL+paypalCertPath+"redirect", paypalTestWebhook, "t-1", e.clock.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	paypalCheckErr(t, e.v.Verify(context.Background(), h, body), ErrBadSignature)
	if got := srv.hitsFor(paypalCertPath + "leaf-after-redirect"); got != 0 {
		t.Fatalf("redirect target fetched %d times, want 0", got)
	}
	if client.CheckRedirect != nil {
		t.Fatal("the caller's client was modified")
	}
}

func TestPayPalCertUnreachableHost(t *testing.T) {
	// An allowed host that refuses connections: PayPal should retry later.
	e := newPayPalEnv(t, nil)
	body := readPayPalFixture(t, "payment_capture_completed.json")
	h := e.sign(t, "leaf", "leaf", paypalTestWebhook, e.clock.Now(), body)
	e.srv.Close()
	paypalCheckErr(t, e.v.Verify(context.Background(), h, body), ErrUpstream)
}

func TestPayPalCertCache(t *testing.T) {
	body := readPayPalFixture(t, "payment_capture_completed.json")
	verify := func(t *testing.T, e *paypalEnv, cert string) {
		t.Helper()
		h := e.sign(t, "leaf", cert, paypalTestWebhook, e.clock.Now(), body)
		if err := e.v.Verify(context.Background(), h, body); err != nil {
			t.Fatalf("Verify(%s): %v", cert, err)
		}
	}
	t.Run("second verify does not fetch", func(t *testing.T) {
		e := newPayPalEnv(t, nil)
		verify(t, e, "leaf-a")
		verify(t, e, "leaf-a")
		if got := e.srv.hitsFor(paypalCertPath + "leaf-a"); got != 1 {
			t.Fatalf("fetches = %d, want 1", got)
		}
	})
	t.Run("entries are re-verified after a day", func(t *testing.T) {
		e := newPayPalEnv(t, nil)
		verify(t, e, "leaf-a")
		e.clock.Advance(23 * time.Hour)
		verify(t, e, "leaf-a")
		e.clock.Advance(2 * time.Hour)
		verify(t, e, "leaf-a")
		if got := e.srv.hitsFor(paypalCertPath + "leaf-a"); got != 2 {
			t.Fatalf("fetches = %d, want 2", got)
		}
	})
	t.Run("entries end when the cert expires", func(t *testing.T) {
		e := newPayPalEnv(t, nil)
		verify(t, e, "leaf-a")
		e.clock.Set(e.pki.leaf.NotAfter.Add(time.Second))
		h := e.sign(t, "leaf", "leaf-a", paypalTestWebhook, e.clock.Now(), body)
		paypalCheckErr(t, e.v.Verify(context.Background(), h, body), ErrBadSignature)
		if got := e.srv.hitsFor(paypalCertPath + "leaf-a"); got != 2 {
			t.Fatalf("fetches = %d, want 2 (expired entry must not be served)", got)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		e := newPayPalEnv(t, func(_ *PayPalEndpoint, o *PayPalOptions) { o.CertCacheSize = 2 })
		for _, c := range []string{"leaf-a", "leaf-b", "leaf-c"} {
			verify(t, e, c)
		}
		if got := e.v.certs.len(); got != 2 {
			t.Fatalf("cache holds %d entries, want 2", got)
		}
		verify(t, e, "leaf-c") // newest: cached
		verify(t, e, "leaf-a") // oldest: evicted, fetched again
		if got := e.srv.hitsFor(paypalCertPath + "leaf-c"); got != 1 {
			t.Errorf("leaf-c fetches = %d, want 1", got)
		}
		if got := e.srv.hitsFor(paypalCertPath + "leaf-a"); got != 2 {
			t.Errorf("leaf-a fetches = %d, want 2", got)
		}
	})
	t.Run("a burst fetches once", func(t *testing.T) {
		e := newPayPalEnv(t, nil)
		const n = 8
		url := e.certURL("gated-burst")
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := e.sign(t, "leaf", "gated-burst", paypalTestWebhook, e.clock.Now(), body)
				errs <- e.v.Verify(context.Background(), h, body)
			}()
		}
		// Release the download only once every other caller has joined it.
		testkit.Eventually(t, "all callers to join the download", func() bool { return e.v.certs.flightWaiters(url) == n-1 })
		close(e.srv.gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Verify: %v", err)
			}
		}
		if got := e.srv.hitsFor(paypalCertPath + "gated-burst"); got != 1 {
			t.Fatalf("fetches = %d, want 1", got)
		}
	})
	t.Run("a waiter gives up with its context", func(t *testing.T) {
		e := newPayPalEnv(t, nil)
		url := e.certURL("gated-cancel")
		leader := make(chan error, 1)
		go func() {
			h := e.sign(t, "leaf", "gated-cancel", paypalTestWebhook, e.clock.Now(), body)
			leader <- e.v.Verify(context.Background(), h, body)
		}()
		testkit.Eventually(t, "the leader to start the download", func() bool { return e.v.certs.flightWaiters(url) == 0 })
		ctx, cancel := context.WithCancel(context.Background())
		follower := make(chan error, 1)
		go func() {
			h := e.sign(t, "leaf", "gated-cancel", paypalTestWebhook, e.clock.Now(), body)
			follower <- e.v.Verify(ctx, h, body)
		}()
		testkit.Eventually(t, "the follower to join", func() bool { return e.v.certs.flightWaiters(url) == 1 })
		cancel()
		paypalCheckErr(t, <-follower, ErrUpstream)
		close(e.srv.gate)
		paypalCheckErr(t, <-leader, nil)
	})
}

func TestPayPalNameMatches(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"messageverificationcerts.paypal.com", true},
		{"MessageVerificationCerts.PayPal.com", true},
		{"paypal.com", false},
		{"evilpaypal.com", false},
		{"api.paypal.com.evil.test", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.name), func(t *testing.T) {
			if got := paypalNameMatches(tt.name, normalisePayPalCNSuffix("paypal.com")); got != tt.want {
				t.Fatalf("paypalNameMatches(%q) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
