package webhooks

// PayPal postback verification: POST the delivery back to PayPal's
// verify-webhook-signature API with an OAuth2 client-credentials token.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

const (
	paypalTokenPath  = "/v1/oauth2/token"
	paypalVerifyPath = "/v1/notifications/verify-webhook-signature"
	// paypalMaxResponse caps what we read from PayPal's API answers.
	paypalMaxResponse = 64 << 10
	// paypalTokenMargin: a token is dropped this long before PayPal says it
	// expires, so a call never starts with a token that dies in flight.
	paypalTokenMargin = time.Minute
)

// paypalTokenSource caches one OAuth2 access token. lock is a one-slot
// semaphore held while refreshing, so a burst of deliveries fetches one token
// and waiters can still give up when their ctx ends.
type paypalTokenSource struct {
	lock    chan struct{}
	mu      sync.Mutex
	token   string
	expires time.Time
}

func newPayPalTokenSource() *paypalTokenSource {
	return &paypalTokenSource{lock: make(chan struct{}, 1)}
}

func (s *paypalTokenSource) cached(now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && now.Before(s.expires) {
		return s.token
	}
	return ""
}

// invalidate drops tok if it is still the cached token (PayPal refused it).
func (s *paypalTokenSource) invalidate(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == tok {
		s.token = ""
	}
}

func (v *PayPalVerifier) accessToken(ctx context.Context) (string, error) {
	s := v.tokens
	if tok := s.cached(v.now()); tok != "" {
		return tok, nil
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("%w: wait for paypal token: %w", ErrUpstream, ctx.Err())
	}
	defer func() { <-s.lock }()
	if tok := s.cached(v.now()); tok != "" { // another caller refreshed it meanwhile
		return tok, nil
	}
	tok, ttl, err := v.fetchToken(ctx)
	if err != nil {
		return "", err
	}
	margin := paypalTokenMargin
	if ttl <= 2*margin {
		margin = ttl / 2
	}
	s.mu.Lock()
	s.token, s.expires = tok, v.now().Add(ttl-margin)
	s.mu.Unlock()
	return tok, nil
}

// fetchToken asks PayPal for a client-credentials token. Every failure is
// ErrUpstream: a refused client secret is our configuration, not the
// delivery's fault, and PayPal's retries give the operator time to fix it.
func (v *PayPalVerifier) fetchToken(ctx context.Context) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.apiBase+paypalTokenPath, strings.NewReader(form))
	if err != nil {
		return "", 0, fmt.Errorf("%w: build token request: %w", ErrUpstream, err)
	}
	req.SetBasicAuth(v.ep.ClientID, v.ep.ClientSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("%w: paypal token: %w", ErrUpstream, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The body is not quoted: it may echo credentials.
		return "", 0, fmt.Errorf("%w: paypal token endpoint answered %d", ErrUpstream, resp.StatusCode)
	}
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, paypalMaxResponse)).Decode(&out); err != nil {
		return "", 0, fmt.Errorf("%w: decode paypal token: %w", ErrUpstream, err)
	}
	if out.AccessToken == "" {
		return "", 0, fmt.Errorf("%w: paypal token response has no access_token", ErrUpstream)
	}
	if out.ExpiresIn < 0 || out.ExpiresIn > 366*24*3600 {
		out.ExpiresIn = 0
	}
	return out.AccessToken, time.Duration(out.ExpiresIn) * time.Second, nil
}

func (v *PayPalVerifier) verifyPostback(ctx context.Context, hd paypalHeaders, body []byte) error {
	if !json.Valid(body) {
		return fmt.Errorf("paypal: %w: body is not JSON", ErrUnparsable)
	}
	payload, err := paypalPostbackBody(hd, v.ep.WebhookID, body)
	if err != nil {
		return fmt.Errorf("paypal: %w: %w", ErrUnparsable, err)
	}
	// Two attempts: a 401 means the cached token was revoked early; one
	// fresh token settles it, a second 401 is a configuration problem.
	for attempt := 0; ; attempt++ {
		tok, err := v.accessToken(ctx)
		if err != nil {
			return fmt.Errorf("paypal: %w", err)
		}
		status, code, err := v.postVerify(ctx, tok, payload)
		if err != nil {
			return fmt.Errorf("paypal: %w", err)
		}
		switch {
		case code == http.StatusUnauthorized && attempt == 0:
			v.tokens.invalidate(tok)
			continue
		case code == http.StatusOK && status == "SUCCESS":
			return nil
		case code == http.StatusOK:
			return fmt.Errorf("paypal: %w: postback verification_status %.32q", ErrBadSignature, status)
		case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
			// PayPal refused the verification request itself: the headers or
			// body of this delivery are not something it signed.
			return fmt.Errorf("paypal: %w: postback answered %d", ErrBadSignature, code)
		default:
			return fmt.Errorf("paypal: %w: postback answered %d", ErrUpstream, code)
		}
	}
}

// paypalPostbackBody builds the verify-webhook-signature request by hand so
// webhook_event is the received bytes exactly: encoding/json would compact and
// HTML-escape even a json.RawMessage, and a re-serialised event is the
// classic cause of FAILURE answers.
func paypalPostbackBody(hd paypalHeaders, webhookID string, body []byte) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(body) + 1024)
	fields := []struct{ name, val string }{
		{"auth_algo", hd.authAlgo},
		{"cert_url", hd.certURL},
		{"transmission_id", hd.transmissionID},
		{"transmission_sig", hd.sigB64},
		{"transmission_time", hd.transmissionTime},
		{"webhook_id", webhookID},
	}
	b.WriteByte('{')
	for _, f := range fields {
		val, err := json.Marshal(f.val)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", f.name, err)
		}
		b.WriteString(`"` + f.name + `":`)
		b.Write(val)
		b.WriteByte(',')
	}
	b.WriteString(`"webhook_event":`)
	b.Write(body)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// postVerify makes one verify-webhook-signature call and returns the
// verification status (when the answer is 200) and the HTTP status.
func (v *PayPalVerifier) postVerify(ctx context.Context, token string, payload []byte) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.apiBase+paypalVerifyPath, bytes.NewReader(payload))
	if err != nil {
		return "", 0, fmt.Errorf("%w: build postback request: %w", ErrUpstream, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("%w: postback: %w", ErrUpstream, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, paypalMaxResponse)) // keep the connection reusable
		return "", resp.StatusCode, nil
	}
	var out struct {
		VerificationStatus string `json:"verification_status"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, paypalMaxResponse)).Decode(&out); err != nil {
		return "", 0, fmt.Errorf("%w: decode postback answer: %w", ErrUpstream, err)
	}
	return out.VerificationStatus, resp.StatusCode, nil
}
