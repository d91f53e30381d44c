package webhooks

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/paypaloauth"
	"github.com/agentledger/reconciler/internal/testkit"
)

const (
	paypalTestClientID     = "client-id"
	paypalTestClientSecret = "client-secret"
)

// fakePayPalAPI is a fake PayPal REST API: it issues client-credentials
// tokens against basic auth, checks the bearer token and the request shape of
// verify-webhook-signature, and answers as mode says.
type fakePayPalAPI struct {
	*httptest.Server
	t *testing.T

	mu          sync.Mutex
	mode        string // SUCCESS, FAILURE, 500, 400, 401-once, slow
	expiresIn   int
	valid       map[string]bool
	tokenCalls  int
	verifyCalls int
	lastFields  map[string]string
	lastEvent   json.RawMessage
	rejected401 bool
}

func newFakePayPalAPI(t *testing.T, mode string) *fakePayPalAPI {
	f := &fakePayPalAPI{t: t, mode: mode, expiresIn: 32400, valid: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/oauth2/token", f.token)
	mux.HandleFunc("POST /v1/notifications/verify-webhook-signature", f.verify)
	f.Server = httptest.NewTLSServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakePayPalAPI) token(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenCalls++
	id, secret, ok := r.BasicAuth()
	if !ok || id != paypalTestClientID || secret != paypalTestClientSecret {
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || r.FormValue("grant_type") != "client_credentials" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	tok := fmt.Sprintf("A21AA-token-%d", f.tokenCalls)
	f.valid[tok] = true
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"scope": "https://uri.paypal.com/services/applications/webhooks", "access_token": tok,
		"token_type": "Bearer", "app_id": "APP-80W284485P519543T", "expires_in": f.expiresIn,
	})
}

func (f *fakePayPalAPI) verify(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.verifyCalls++
	mode := f.mode
	auth := r.Header.Get("Authorization")
	tok, _ := bytes.CutPrefix([]byte(auth), []byte("Bearer "))
	if mode == "401-once" && !f.rejected401 {
		f.rejected401 = true
		delete(f.valid, string(tok)) // revoked early
	}
	if !f.valid[string(tok)] {
		f.mu.Unlock()
		http.Error(w, `{"error":"invalid_token"}`, http.StatusUnauthorized)
		return
	}
	var req map[string]json.RawMessage
	if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&req) != nil {
		f.mu.Unlock()
		http.Error(w, `{"name":"INVALID_REQUEST"}`, http.StatusBadRequest)
		return
	}
	f.lastFields = map[string]string{}
	for _, k := range []string{"auth_algo", "cert_url", "transmission_id", "transmission_sig", "transmission_time", "webhook_id"} {
		var s string
		if err := json.Unmarshal(req[k], &s); err != nil || s == "" {
			f.mu.Unlock()
			http.Error(w, `{"name":"VALIDATION_ERROR"}`, http.StatusBadRequest)
			return
		}
		f.lastFields[k] = s
	}
	f.lastEvent = req["webhook_event"]
	f.mu.Unlock()

	switch mode {
	case "500":
		http.Error(w, `{"name":"INTERNAL_SERVICE_ERROR"}`, http.StatusInternalServerError)
	case "400":
		http.Error(w, `{"name":"VALIDATION_ERROR"}`, http.StatusBadRequest)
	case "slow":
		<-r.Context().Done()
	case "FAILURE":
		_, _ = w.Write([]byte(`{"verification_status":"FAILURE"}`))
	default:
		_, _ = w.Write([]byte(`{"verification_status":"SUCCESS"}`))
	}
}

func (f *fakePayPalAPI) counts() (tokens, verifies int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenCalls, f.verifyCalls
}

// paypalPostbackBodyFixture is a delivery whose bytes change under any JSON
// re-serialisation: indentation, a trailing newline and characters that
// encoding/json HTML-escapes.
var paypalPostbackBodyFixture = []byte("{\n  \"id\": \"WH-1\",\n  \"event_type\": \"PAYMENT.CAPTURE.COMPLETED\",\n" +
	"  \"summary\": \"<b>paid</b> & done\",\n  \"resource\": {\"id\": \"2GG279541U471931P\", \"custom_id\": \"rl_x\"}\n}\n")

func newPostbackVerifier(t *testing.T, api *fakePayPalAPI, clock *testkit.Clock, edit func(*PayPalEndpoint, *PayPalOptions)) *PayPalVerifier {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(api.Certificate())
	ep := PayPalEndpoint{Name: "pb", Tenant: "acme", WebhookID: paypalTestWebhook, Verify: PayPalVerifyPostback,
		APIBase: api.URL, ClientID: paypalTestClientID, ClientSecret: paypalTestClientSecret, RootCAs: roots}
	opts := PayPalOptions{Now: clock.Now, Timeout: 10 * time.Second}
	if edit != nil {
		edit(&ep, &opts)
	}
	v, err := NewPayPalVerifier(ep, opts)
	if err != nil {
		t.Fatalf("NewPayPalVerifier: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// postbackHeaders are delivery headers; postback mode never fetches the
// cert, so the signature only has to be well-formed.
func postbackHeaders(at time.Time) http.Header {
	h := http.Header{}
	h.Set(PayPalHeaderTransmissionID, "69cd13f0-d67a-11e5-baa3-778b53f4ae55")
	h.Set(PayPalHeaderTransmissionTime, at.UTC().Format(time.RFC3339))
	h.Set(PayPalHeaderTransmissionSig, "bG9yZW0gaXBzdW0gZG9sb3Igc2l0IGFtZXQ=")
	h.Set(PayPalHeaderCertURL, "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77")
	h.Set(PayPalHeaderAuthAlgo, "SHA256withRSA")
	return h
}

func TestPayPalPostback(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		mode        string
		secret      string
		body        []byte
		at          time.Duration // transmission time relative to now
		opts        func(*PayPalOptions)
		want        error
		wantTokens  int
		wantVerifys int
	}{
		{name: "SUCCESS", mode: "SUCCESS", wantTokens: 1, wantVerifys: 1},
		{name: "FAILURE is a bad signature", mode: "FAILURE", want: ErrBadSignature, wantTokens: 1, wantVerifys: 1},
		{name: "500 is upstream", mode: "500", want: ErrUpstream, wantTokens: 1, wantVerifys: 1},
		{name: "400 is a bad signature", mode: "400", want: ErrBadSignature, wantTokens: 1, wantVerifys: 1},
		{name: "token revoked early is refreshed once", mode: "401-once", wantTokens: 2, wantVerifys: 2},
		{name: "wrong client secret is upstream", mode: "SUCCESS", secret: "nope", want: ErrUpstream, wantTokens: 1},
		// Counts are not checked: under load the token call may time out too,
		// which is the same answer.
		{name: "slow postback is upstream", mode: "slow", want: ErrUpstream, wantTokens: -1,
			opts: func(o *PayPalOptions) { o.Timeout = 150 * time.Millisecond }},
		{name: "stale after SUCCESS", mode: "SUCCESS", at: -100 * time.Hour, want: ErrStale, wantTokens: 1, wantVerifys: 1},
		{name: "body not JSON is refused before any call", mode: "SUCCESS", body: []byte("{nope"), want: ErrUnparsable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakePayPalAPI(t, tt.mode)
			clock := testkit.NewClock(t0)
			v := newPostbackVerifier(t, api, clock, func(ep *PayPalEndpoint, o *PayPalOptions) {
				if tt.secret != "" {
					ep.ClientSecret = tt.secret
				}
				if tt.opts != nil {
					tt.opts(o)
				}
			})
			body := paypalPostbackBodyFixture
			if tt.body != nil {
				body = tt.body
			}
			h := postbackHeaders(t0.Add(tt.at))
			err := v.Verify(context.Background(), h, body)
			paypalCheckErr(t, err, tt.want)
			if tt.secret != "" && err != nil && bytes.Contains([]byte(err.Error()), []byte(tt.secret)) {
				t.Errorf("error leaks the client secret: %v", err)
			}
			if tt.wantTokens < 0 {
				return
			}
			tokens, verifies := api.counts()
			if tokens != tt.wantTokens || verifies != tt.wantVerifys {
				t.Errorf("token calls = %d, verify calls = %d; want %d, %d", tokens, verifies, tt.wantTokens, tt.wantVerifys)
			}
			if tt.wantVerifys == 0 {
				return
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if !bytes.Equal(api.lastEvent, bytes.TrimSpace(body)) {
				t.Errorf("webhook_event was re-serialised:\n got %s\nwant %s", api.lastEvent, body)
			}
			want := map[string]string{
				"auth_algo": "SHA256withRSA", "cert_url": h.Get(PayPalHeaderCertURL),
				"transmission_id": h.Get(PayPalHeaderTransmissionID), "transmission_sig": h.Get(PayPalHeaderTransmissionSig),
				"transmission_time": h.Get(PayPalHeaderTransmissionTime), "webhook_id": paypalTestWebhook,
			}
			for k, w := range want {
				if got := api.lastFields[k]; got != w {
					t.Errorf("%s = %q, want %q", k, got, w)
				}
			}
		})
	}
}

func TestPayPalPostbackTokenCache(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	api := newFakePayPalAPI(t, "SUCCESS")
	api.expiresIn = 3600
	clock := testkit.NewClock(t0)
	v := newPostbackVerifier(t, api, clock, nil)
	verify := func() {
		t.Helper()
		if err := v.Verify(context.Background(), postbackHeaders(clock.Now()), paypalPostbackBodyFixture); err != nil {
			t.Fatalf("Verify: %v", err)
		}
	}
	verify()
	verify()
	if tokens, _ := api.counts(); tokens != 1 {
		t.Fatalf("token calls = %d after two verifies, want 1", tokens)
	}
	// The token is dropped a minute before PayPal's expiry.
	clock.Advance(3600*time.Second - paypaloauth.Margin - time.Second)
	verify()
	if tokens, _ := api.counts(); tokens != 1 {
		t.Fatalf("token calls = %d just inside the margin, want 1", tokens)
	}
	clock.Advance(2 * time.Second)
	verify()
	if tokens, _ := api.counts(); tokens != 2 {
		t.Fatalf("token calls = %d past the margin, want 2", tokens)
	}

	// A burst with no valid token fetches one token.
	clock.Advance(2 * time.Hour)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := v.Verify(context.Background(), postbackHeaders(clock.Now()), paypalPostbackBodyFixture); err != nil {
				t.Errorf("Verify: %v", err)
			}
		}()
	}
	wg.Wait()
	if tokens, verifies := api.counts(); tokens != 3 || verifies != 12 {
		t.Fatalf("token calls = %d, verify calls = %d after the burst; want 3, 12", tokens, verifies)
	}
}
