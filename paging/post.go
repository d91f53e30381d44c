package paging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Retry shapes the retries inside one call. The zero value takes the defaults.
type Retry struct {
	// Base is the first backoff ceiling (default 500 ms); each retry doubles it.
	Base time.Duration
	// Max caps one backoff (default 30 s), and a server's Retry-After.
	Max time.Duration
	// MaxElapsed bounds a call whose context has no deadline (default 2 min).
	MaxElapsed time.Duration
	// AttemptTimeout bounds one HTTP round trip (default 10 s).
	AttemptTimeout time.Duration
	// Sleep waits d or until ctx ends; tests replace it. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retry defaults.
const (
	DefaultRetryBase      = 500 * time.Millisecond
	DefaultRetryMax       = 30 * time.Second
	DefaultMaxElapsed     = 2 * time.Minute
	DefaultAttemptTimeout = 10 * time.Second
	maxResponseBody       = 64 << 10
	userAgent             = "reconciler-paging/1"
	contentTypeJSON       = "application/json"
)

func (r Retry) withDefaults() Retry {
	if r.Base <= 0 {
		r.Base = DefaultRetryBase
	}
	if r.Max <= 0 {
		r.Max = DefaultRetryMax
	}
	if r.MaxElapsed <= 0 {
		r.MaxElapsed = DefaultMaxElapsed
	}
	if r.AttemptTimeout <= 0 {
		r.AttemptTimeout = DefaultAttemptTimeout
	}
	if r.Sleep == nil {
		r.Sleep = sleep
	}
	return r
}

// backoff is capped exponential backoff with full jitter: uniform in
// [0, min(Max, Base·2^n)], so many callers retrying after one outage spread
// out instead of arriving together.
func (r Retry) backoff(n int) time.Duration {
	ceil := r.Base
	for i := 0; i < n && ceil < r.Max; i++ {
		ceil *= 2
	}
	ceil = min(ceil, r.Max)
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attemptError is one failed round trip: retryable or not, with the
// server's Retry-After when it sent one.
type attemptError struct {
	status     int
	retryable  bool
	retryAfter time.Duration
	err        error
}

func (e *attemptError) Error() string {
	if e.status != 0 {
		return fmt.Sprintf("http %d", e.status)
	}
	return e.err.Error()
}

// postJSON POSTs body to url until a 2xx, a permanent refusal, or the end of
// the call's time. what names the call in errors (never the URL: it may
// carry a credential, as Slack webhook URLs do).
func postJSON(ctx context.Context, client *http.Client, target string, body any, r Retry, what string) error {
	buf, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", what, ErrInvalidPage, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.MaxElapsed)
		defer cancel()
	}
	var last *attemptError
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w after %d attempts (last: %v): %w", what, ErrUndelivered, n, lastText(last), err)
		}
		ae := postOnce(ctx, client, target, buf, r.AttemptTimeout)
		if ae == nil {
			return nil
		}
		if !ae.retryable {
			return fmt.Errorf("%s: %w: %s", what, ErrRejected, ae.Error())
		}
		last = ae
		wait := max(r.backoff(n), min(ae.retryAfter, r.Max))
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			// Sleeping past the deadline would only end in the same error later.
			return fmt.Errorf("%s: %w after %d attempts (last: %v)", what, ErrUndelivered, n+1, lastText(last))
		}
		if err := r.Sleep(ctx, wait); err != nil {
			return fmt.Errorf("%s: %w after %d attempts (last: %v): %w", what, ErrUndelivered, n+1, lastText(last), err)
		}
	}
}

func lastText(ae *attemptError) string {
	if ae == nil {
		return "none"
	}
	return ae.Error()
}

// postOnce is one round trip, bounded by timeout.
func postOnce(ctx context.Context, client *http.Client, target string, body []byte, timeout time.Duration) *attemptError {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return &attemptError{err: errors.New("bad url")}
	}
	req.Header.Set("Content-Type", contentTypeJSON)
	req.Header.Set("User-Agent", userAgent)
	resp, err := client.Do(req)
	if err != nil {
		// A *url.Error names the URL; keep only the cause.
		cause := err
		var ue *url.Error
		if errors.As(err, &ue) {
			cause = ue.Err
		}
		return &attemptError{retryable: true, err: fmt.Errorf("network: %w", cause)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	s := resp.StatusCode
	switch {
	case s >= 200 && s < 300:
		return nil
	case s == http.StatusTooManyRequests || s == http.StatusRequestTimeout || s >= 500:
		return &attemptError{status: s, retryable: true, retryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	default:
		return &attemptError{status: s}
	}
}

// retryAfter reads a Retry-After header in seconds (the HTTP-date form is
// rare for these APIs and ignored).
func retryAfter(v string) time.Duration {
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}
