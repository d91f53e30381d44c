package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/apierror"
)

// Defaults of a Client.
const (
	// DefaultRequestTimeout bounds one API request (a long poll gets its wait on top).
	DefaultRequestTimeout = 10 * time.Second
	// DefaultWait is how long one long-polling claim (?wait=) holds; the API's maximum.
	DefaultWait = 30 * time.Second
	// DefaultPollInterval is how often a NATS wait also asks the API.
	DefaultPollInterval = 2 * time.Second
	// DefaultRetries is how often a failed request is sent again (so 1+4 sends).
	DefaultRetries = 4
	// DefaultReportTimeout bounds an outcome report with all its retries. It
	// runs even when the caller's context has ended: the vendor call that
	// used it up is exactly the one whose outcome must reach the ledger.
	DefaultReportTimeout = 30 * time.Second
	// DefaultMaxResponse caps an API answer the client reads.
	DefaultMaxResponse = 4 << 20
)

// Client talks to the reconciler claim API. It is safe for concurrent use.
type Client struct {
	base   string
	token  string
	tenant string
	hc     *http.Client
	js     jetstream.JetStream
	log    *slog.Logger

	requestTimeout time.Duration
	reportTimeout  time.Duration
	callTimeout    time.Duration
	wait           time.Duration
	poll           time.Duration
	retries        int
	backoff        time.Duration
	maxBackoff     time.Duration
	scrub          *Scrubber
	streamOpts     []string // stream name, subject prefix
	maxResponse    int64
	waitQueued     bool
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client for the API (default: a client of its own).
// Its Timeout, if any, must exceed the long-poll wait.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithNATS makes Do wait for in-flight keys on NATS (events.Await), with the
// API as the fallback; without it Do long-polls the API. js must come from a
// connection with the tenant's inbox prefix (ConnectNATS makes one): a bus
// with credentials delivers a tenant's events on that prefix only.
func WithNATS(js jetstream.JetStream) Option { return func(c *Client) { c.js = js } }

// WithStream names the event stream and subject prefix when they are not
// the defaults (RECON, recon).
func WithStream(stream, subjectPrefix string) Option {
	return func(c *Client) { c.streamOpts = []string{stream, subjectPrefix} }
}

// WithWaitQueued makes Do wait for a queued call (an outbox tool's: the
// runtime's Worker makes it) until the worker's result settles the row,
// and return as a replay does (Outcome.Queued) or a *StopError, instead of
// returning a *QueuedError at once: synchronous semantics for a runtime
// that has no way to park a run. The wait reads the row every poll
// interval, and wakes on the key's resolution event WithNATS.
func WithWaitQueued() Option { return func(c *Client) { c.waitQueued = true } }

// WithPollInterval sets how often a NATS wait also asks the API, and the
// pause between long polls after an error (default 2 s).
func WithPollInterval(d time.Duration) Option { return func(c *Client) { c.poll = d } }

// WithWait sets how long one long-polling claim holds (default and most 30 s).
func WithWait(d time.Duration) Option { return func(c *Client) { c.wait = d } }

// WithLogger sets the logger (default: discard). Tokens and bodies are never logged.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithScrubFields replaces the field names Scrub removes (see DefaultScrubFields).
func WithScrubFields(fields ...string) Option {
	return func(c *Client) { c.scrub = NewScrubber(fields...) }
}

// WithTenant names the tenant an admin token reads (Get, List add ?tenant=).
func WithTenant(tenant string) Option { return func(c *Client) { c.tenant = tenant } }

// WithMaxResponse caps an answer the client reads (default 4 MiB); a
// larger one is refused, not truncated. An admin tool listing rows that keep
// large request bodies needs more.
func WithMaxResponse(n int64) Option { return func(c *Client) { c.maxResponse = n } }

// WithRequestTimeout bounds one API request (default 10 s).
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithReportTimeout bounds an outcome report with its retries (default 30 s).
func WithReportTimeout(d time.Duration) Option { return func(c *Client) { c.reportTimeout = d } }

// WithCallTimeout bounds the vendor call inside Do (default: none beyond ctx).
// A call that runs past it is reported as a timeout: the row becomes unknown.
func WithCallTimeout(d time.Duration) Option { return func(c *Client) { c.callTimeout = d } }

// WithRetries sets how often a failed API request is sent again and the
// first pause between sends (doubling, jittered, at most 2 s). A request is
// retried only when sending it again cannot do harm: a claim finds the same
// row, a report with the same body is applied once.
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *Client) { c.retries, c.backoff = n, backoff }
}

// New returns a client of the API at baseURL (http://127.0.0.1:8080)
// authenticating with token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base url %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	if strings.TrimSpace(token) == "" || strings.ContainsAny(token, " \t\r\n") {
		return nil, errors.New("client: token is empty or contains white space")
	}
	c := &Client{
		base: strings.TrimRight(u.String(), "/"), token: token,
		requestTimeout: DefaultRequestTimeout, reportTimeout: DefaultReportTimeout,
		wait: DefaultWait, poll: DefaultPollInterval, retries: DefaultRetries,
		backoff: 100 * time.Millisecond, maxBackoff: 2 * time.Second,
		maxResponse: DefaultMaxResponse,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.scrub == nil {
		c.scrub = NewScrubber(DefaultScrubFields...)
	}
	switch {
	case c.requestTimeout <= 0, c.reportTimeout <= 0, c.poll <= 0, c.backoff <= 0:
		return nil, errors.New("client: timeouts, poll interval and backoff must be positive")
	case c.wait <= 0 || c.wait > DefaultWait:
		return nil, fmt.Errorf("client: wait must be from 1ns to %s", DefaultWait)
	case c.retries < 0:
		return nil, errors.New("client: negative retries")
	case c.callTimeout < 0:
		return nil, errors.New("client: negative call timeout")
	case c.maxResponse <= 0:
		return nil, errors.New("client: max response must be positive")
	}
	return c, nil
}

// Scrub removes model-supplied idempotency fields from args with the
// client's field list (see Scrubber.Scrub).
func (c *Client) Scrub(args map[string]any) map[string]any { return c.scrub.Scrub(args) }

// request is one API round trip.
type request struct {
	method string
	path   string // already escaped
	query  url.Values
	body   any
	// extra is added to the request timeout (a long poll).
	extra time.Duration
	// accept are the non-2xx statuses whose body is a normal answer (a claim's 409 wait, 423 stop).
	accept []int
	// idempotencyKey is the call's Idempotency-Key, the same on every
	// send of it (do sets it for a POST).
	idempotencyKey string
}

// IdempotencyKeyHeader is the header a POST carries: one value per
// logical call (Claim, Start, Report, a decision…), sent again unchanged
// with every resend of that call, so a resend whose first answer was lost
// gets that answer instead of a second run (README "A lost answer").
const IdempotencyKeyHeader = "Idempotency-Key"

// newIdempotencyKey is 128 random bits (crypto/rand.Text: 26 characters).
func newIdempotencyKey() string { return crand.Text() }

// do sends r, retrying when retry is true and the failure is one a resend
// cannot make worse, and decodes a 2xx (or accepted) answer into out. It
// returns the HTTP status of the answer it decoded.
func (c *Client) do(ctx context.Context, r request, retry bool, out any) (int, error) {
	var body []byte
	if r.body != nil {
		var err error
		if body, err = json.Marshal(r.body); err != nil {
			return 0, fmt.Errorf("encode %s %s: %w", r.method, r.path, err)
		}
	}
	if r.method == http.MethodPost && r.idempotencyKey == "" {
		r.idempotencyKey = newIdempotencyKey()
	}
	attempts := 1
	if retry {
		attempts += c.retries
	}
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			if err := c.sleep(ctx, i); err != nil {
				return 0, fmt.Errorf("%s %s: %w (last error: %w)", r.method, r.path, err, last)
			}
			c.log.WarnContext(ctx, "retrying reconciler request", "method", r.method, "path", r.path, "attempt", i+1, "err", last)
		}
		status, err := c.once(ctx, r, body, out)
		if err == nil {
			return status, nil
		}
		last = err
		var ae *Error
		if errors.As(err, &ae) && !ae.retryable() {
			return status, err
		}
		if ctx.Err() != nil {
			return status, err
		}
	}
	return 0, last
}

// sleep waits the jittered backoff before send number i+1.
func (c *Client) sleep(ctx context.Context, i int) error {
	d := c.backoff << (i - 1)
	if d > c.maxBackoff || d <= 0 {
		d = c.maxBackoff
	}
	d = d/2 + rand.N(d/2+1) // jitter: many runtimes retrying after one outage must not stampede
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) once(ctx context.Context, r request, body []byte, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout+r.extra)
	defer cancel()
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, rd)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	injectTrace(ctx, req)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.idempotencyKey != "" {
		req.Header.Set(IdempotencyKeyHeader, r.idempotencyKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	// One byte past the cap tells a complete answer from a cut one.
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxResponse+1))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", r.method, r.path, err)
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	for _, s := range r.accept {
		ok = ok || resp.StatusCode == s
	}
	if ok && !isErrorBody(data) {
		if int64(len(data)) > c.maxResponse {
			return resp.StatusCode, fmt.Errorf("%s %s: answer larger than %d bytes", r.method, r.path, c.maxResponse)
		}
		if out == nil {
			return resp.StatusCode, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", r.method, r.path, err)
		}
		return resp.StatusCode, nil
	}
	return resp.StatusCode, fmt.Errorf("%s %s: %w", r.method, r.path, decodeError(resp.StatusCode, data))
}

// isErrorBody reports whether data is the API's error shape; a 409 answers
// either a decision (wait) or an error (compensation_pending).
func isErrorBody(data []byte) bool {
	var probe struct {
		Error *json.RawMessage `json:"error"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Error != nil
}

// decodeError builds an *Error from an error answer; a body that is not the
// API's (a proxy's HTML page) gets a code from the status.
func decodeError(status int, data []byte) *Error {
	var b apierror.Body
	if json.Unmarshal(data, &b) == nil && b.Error.Code != "" {
		return &Error{Status: status, Code: b.Error.Code, Message: b.Error.Message}
	}
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	if code == "" {
		code = "http_" + fmt.Sprint(status)
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &Error{Status: status, Code: code, Message: msg}
}

// keyPath is the escaped path of a claim's route. A business key may hold
// "/", "?", "#" or "%", all of which PathEscape encodes; a key of "." or
// ".." would be a dot segment that a proxy may resolve away, so its dots are
// encoded too.
func keyPath(key string, suffix string) string {
	k := url.PathEscape(key)
	if strings.Trim(key, ".") == "" {
		k = strings.Repeat("%2E", len(key))
	}
	return "/v1/claims/" + k + suffix
}
