package paypaloauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// TokenPath is PayPal's OAuth2 token endpoint, below the API base URL.
const TokenPath = "/v1/oauth2/token"

// Bounds of a token answer.
const (
	// MaxResponse caps what is read of the token endpoint's answer.
	MaxResponse = 64 << 10
	// Margin is how long before its expiry a token is renewed.
	Margin = time.Minute
	// maxLife bounds a plausible expires_in; anything outside 0..maxLife
	// counts as 0 (use once, fetch again next time).
	maxLife = 366 * 24 * time.Hour
)

// Options configure a Source. Base, ClientID, ClientSecret and Client are
// required.
type Options struct {
	// Base is the API base URL, e.g. https://api-m.paypal.com.
	Base                   string
	ClientID, ClientSecret string
	Client                 *http.Client
	// Timeout bounds one token request (0: the caller's context only).
	Timeout time.Duration
	// Now is the clock of expiries (nil: time.Now).
	Now func() time.Time
	// BeforeFetch runs before each token request, e.g. a rate limiter's
	// Wait (nil: nothing). Its error is returned as is.
	BeforeFetch func(ctx context.Context) error
}

// StatusError is a token endpoint answer other than 200. It carries no body.
type StatusError struct{ Status int }

func (e *StatusError) Error() string {
	return fmt.Sprintf("paypal token endpoint answered %d", e.Status)
}

// Source caches one access token. It is safe for concurrent use.
type Source struct {
	o Options
	// fetching is held while fetching: unlike a mutex, a waiter can leave
	// when its context ends.
	fetching *semaphore.Weighted
	mu       sync.Mutex
	token    string
	expires  time.Time
}

// New returns a Source with no token yet.
func New(o Options) (*Source, error) {
	if o.Base == "" || o.ClientID == "" || o.ClientSecret == "" || o.Client == nil {
		return nil, errors.New("paypaloauth: base URL, client id, client secret and HTTP client are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Source{o: o, fetching: semaphore.NewWeighted(1)}, nil
}

// Token returns the cached token, or fetches a new one when there is none
// or it is due for renewal. Errors: the context's, BeforeFetch's,
// *StatusError, or a transport or decoding error.
func (s *Source) Token(ctx context.Context) (string, error) {
	if tok := s.cached(); tok != "" {
		return tok, nil
	}
	if err := s.fetching.Acquire(ctx, 1); err != nil {
		return "", fmt.Errorf("wait for paypal token: %w", err)
	}
	defer s.fetching.Release(1)
	if tok := s.cached(); tok != "" { // another caller fetched it meanwhile
		return tok, nil
	}
	if s.o.BeforeFetch != nil {
		if err := s.o.BeforeFetch(ctx); err != nil {
			return "", err
		}
	}
	tok, life, err := s.fetch(ctx)
	if err != nil {
		return "", err
	}
	margin := Margin
	if life <= 2*margin {
		margin = life / 2
	}
	s.mu.Lock()
	s.token, s.expires = tok, s.o.Now().Add(life-margin)
	s.mu.Unlock()
	return tok, nil
}

// Invalidate drops tok if it is still the cached token (PayPal refused it),
// so the next Token fetches another.
func (s *Source) Invalidate(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == tok {
		s.token = ""
	}
}

func (s *Source) cached() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && s.o.Now().Before(s.expires) {
		return s.token
	}
	return ""
}

func (s *Source) fetch(ctx context.Context) (string, time.Duration, error) {
	if s.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.o.Timeout)
		defer cancel()
	}
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.o.Base+TokenPath, strings.NewReader(form))
	if err != nil {
		return "", 0, fmt.Errorf("build paypal token request: %w", err)
	}
	req.SetBasicAuth(s.o.ClientID, s.o.ClientSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("paypal token: %w", withoutURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponse))
		return "", 0, &StatusError{Status: resp.StatusCode}
	}
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxResponse)).Decode(&out); err != nil {
		return "", 0, fmt.Errorf("decode paypal token: %w", err)
	}
	if out.AccessToken == "" {
		return "", 0, errors.New("paypal token answer has no access_token")
	}
	life := time.Duration(out.ExpiresIn) * time.Second
	if out.ExpiresIn < 0 || life > maxLife {
		life = 0
	}
	return out.AccessToken, life, nil
}

// withoutURL keeps a transport error's cause and drops the request URL.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
