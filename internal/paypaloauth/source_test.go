package paypaloauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/testkit"
)

// fakeTokenAPI behaves like PayPal's /v1/oauth2/token: basic auth with the
// client id and secret, a form body asking for client_credentials, and a
// JSON answer; a wrong secret is 401 with an error body that echoes it.
type fakeTokenAPI struct {
	calls   atomic.Int32
	status  atomic.Int32 // 0: 200
	life    int64        // expires_in
	body    string       // replaces the JSON answer when set
	delay   time.Duration
	release chan struct{} // when set, each answer waits for it
}

func (f *fakeTokenAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	if f.release != nil {
		<-f.release
	}
	time.Sleep(f.delay)
	id, secret, ok := r.BasicAuth()
	if r.Method != http.MethodPost || r.URL.Path != TokenPath || !ok || id != "cid" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		http.Error(w, "bad grant", http.StatusBadRequest)
		return
	}
	if secret != "s3cret" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":"invalid_client","error_description":"bad secret %s"}`, secret)
		return
	}
	if s := f.status.Load(); s != 0 {
		w.WriteHeader(int(s))
		fmt.Fprint(w, `{"error":"server_error","secret":"s3cret"}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if f.body != "" {
		fmt.Fprint(w, f.body)
		return
	}
	fmt.Fprintf(w, `{"scope":"https://uri.paypal.com/services/payments","access_token":"A21AA-%d","token_type":"Bearer","app_id":"APP-1","expires_in":%d,"nonce":"n"}`, n, f.life)
}

func newSource(t *testing.T, api *fakeTokenAPI, secret string, clock *testkit.Clock) *Source {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	s, err := New(Options{Base: srv.URL, ClientID: "cid", ClientSecret: secret, Client: srv.Client(), Timeout: 2 * time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenCachedAndRenewed(t *testing.T) {
	tests := []struct {
		name      string
		life      int64
		advance   time.Duration // after the first Token
		wantCalls int32
	}{
		{name: "reused while more than a minute is left", life: 3600, advance: 3600*time.Second - Margin - time.Second, wantCalls: 1},
		{name: "renewed a minute before expiry", life: 3600, advance: 3600*time.Second - Margin, wantCalls: 2},
		{name: "a short-lived token is renewed halfway", life: 60, advance: 30 * time.Second, wantCalls: 2},
		{name: "a short-lived token is reused before halfway", life: 60, advance: 29 * time.Second, wantCalls: 1},
		{name: "no expires_in: fetched every time", life: 0, advance: 0, wantCalls: 2},
		{name: "an absurd expires_in counts as none", life: 1 << 40, advance: 0, wantCalls: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeTokenAPI{life: tc.life}
			clock := testkit.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			s := newSource(t, api, "s3cret", clock)
			first, err := s.Token(t.Context())
			if err != nil || !strings.HasPrefix(first, "A21AA-") {
				t.Fatalf("Token: %q %v", first, err)
			}
			clock.Advance(tc.advance)
			if _, err := s.Token(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := api.calls.Load(); got != tc.wantCalls {
				t.Fatalf("token requests: %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestTokenErrors(t *testing.T) {
	tests := []struct {
		name       string
		secret     string
		status     int32
		body       string
		wantStatus int // 0: not a StatusError
	}{
		{name: "wrong secret", secret: "wrong", wantStatus: 401},
		{name: "server error", secret: "s3cret", status: 503, wantStatus: 503},
		{name: "rate limited", secret: "s3cret", status: 429, wantStatus: 429},
		{name: "not JSON", secret: "s3cret", body: `<html>`},
		{name: "no access_token", secret: "s3cret", body: `{"expires_in":3600}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeTokenAPI{life: 3600, body: tc.body}
			api.status.Store(tc.status)
			s := newSource(t, api, tc.secret, testkit.NewClock(time.Now()))
			tok, err := s.Token(t.Context())
			if err == nil || tok != "" {
				t.Fatalf("Token: %q %v, want an error", tok, err)
			}
			var se *StatusError
			if got := errors.As(err, &se); got != (tc.wantStatus != 0) || (got && se.Status != tc.wantStatus) {
				t.Fatalf("error %v: StatusError %v, want status %d", err, got, tc.wantStatus)
			}
			for _, secret := range []string{"s3cret", "wrong", "127.0.0.1"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q carries %q", err, secret)
				}
			}
			// Nothing is cached after a failure.
			api.status.Store(0)
			api.body = ""
			if tc.secret == "s3cret" {
				if _, err := s.Token(t.Context()); err != nil {
					t.Fatalf("after the failure: %v", err)
				}
			}
		})
	}
}

// TestTokenOneFetchForABurst: callers that find no token wait for one
// fetch; a caller whose context ends while waiting leaves with its error.
func TestTokenOneFetchForABurst(t *testing.T) {
	api := &fakeTokenAPI{life: 3600, release: make(chan struct{})}
	s := newSource(t, api, "s3cret", testkit.NewClock(time.Now()))
	var wg sync.WaitGroup
	toks := make([]string, 20)
	errs := make([]error, 20)
	for i := range toks {
		wg.Go(func() { toks[i], errs[i] = s.Token(context.Background()) })
	}
	// One more caller gives up while the fetch is held.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for api.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Token(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter whose context ended: %v", err)
	}
	close(api.release)
	wg.Wait()
	for i := range toks {
		if errs[i] != nil || toks[i] != toks[0] {
			t.Fatalf("caller %d: %q %v, want %q", i, toks[i], errs[i], toks[0])
		}
	}
	if got := api.calls.Load(); got != 1 {
		t.Fatalf("token requests: %d, want 1", got)
	}
}

func TestInvalidate(t *testing.T) {
	api := &fakeTokenAPI{life: 3600}
	s := newSource(t, api, "s3cret", testkit.NewClock(time.Now()))
	first, _ := s.Token(t.Context())
	s.Invalidate("some-older-token") // not the cached one: kept
	if again, _ := s.Token(t.Context()); again != first {
		t.Fatalf("an unrelated Invalidate dropped the token: %q → %q", first, again)
	}
	s.Invalidate(first)
	if again, _ := s.Token(t.Context()); again == first || api.calls.Load() != 2 {
		t.Fatalf("after Invalidate: %q (first %q), %d requests", again, first, api.calls.Load())
	}
}

func TestBeforeFetch(t *testing.T) {
	api := &fakeTokenAPI{life: 3600}
	srv := httptest.NewServer(api)
	defer srv.Close()
	var before atomic.Int32
	refuse := errors.New("rate limit wait cancelled")
	s, err := New(Options{Base: srv.URL, ClientID: "cid", ClientSecret: "s3cret", Client: srv.Client(),
		BeforeFetch: func(context.Context) error {
			if before.Add(1) == 1 {
				return refuse
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Token(t.Context()); !errors.Is(err, refuse) || api.calls.Load() != 0 {
		t.Fatalf("refused BeforeFetch: %v, %d requests", err, api.calls.Load())
	}
	for range 3 {
		if _, err := s.Token(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if before.Load() != 2 || api.calls.Load() != 1 {
		t.Fatalf("BeforeFetch ran %d times for %d requests, want 2 and 1 (not for cached tokens)", before.Load(), api.calls.Load())
	}
}

func TestNewRequires(t *testing.T) {
	for _, o := range []Options{
		{ClientID: "c", ClientSecret: "s", Client: http.DefaultClient},
		{Base: "https://x", ClientSecret: "s", Client: http.DefaultClient},
		{Base: "https://x", ClientID: "c", Client: http.DefaultClient},
		{Base: "https://x", ClientID: "c", ClientSecret: "s"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
