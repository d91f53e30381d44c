package resolver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentledger/reconciler/internal/paypaloauth"
	"github.com/agentledger/reconciler/ledger"
)

// PayPalOptions configure NewPayPal.
type PayPalOptions struct {
	// APIBase is paypal.api_base (default https://api-m.paypal.com).
	APIBase string
	// ClientID and ClientSecret get the OAuth client-credentials token;
	// the secret and the token are never logged.
	ClientID, ClientSecret string
	HTTPClient             *http.Client
	// CallTimeout bounds one PayPal call (default 10 s).
	CallTimeout time.Duration
	// Rate is the token bucket in requests per second (default 30).
	Rate float64
	// Now is the clock of the token cache (default time.Now).
	Now func() time.Time
}

// PayPal defaults.
const (
	DefaultPayPalAPIBase = "https://api-m.paypal.com"
	DefaultPayPalRPS     = 30
	// maxPayPalRequestID is PayPal-Request-Id's documented maximum length.
	maxPayPalRequestID = 108
	maxPayPalBody      = 1 << 20
)

// PayPal is the PayPal lookup (plain net/http). PayPal has no lookup by
// custom_id, so Find returns ErrNoLookup and a replay with the same
// PayPal-Request-Id — which returns the original request's latest result
// inside the API's window (Orders v2: 6 h) — is the main path.
type PayPal struct {
	base   string
	opts   PayPalOptions
	client *http.Client
	lim    *rate.Limiter
	tokens *paypaloauth.Source
}

var _ Lookup = (*PayPal)(nil)

// NewPayPal returns the PayPal lookup.
func NewPayPal(opts PayPalOptions) (*PayPal, error) {
	if opts.APIBase == "" {
		opts.APIBase = DefaultPayPalAPIBase
	}
	u, err := url.Parse(opts.APIBase)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, errors.New("paypal lookup: api_base must be an absolute http(s) URL")
	}
	if opts.ClientID == "" || opts.ClientSecret == "" {
		return nil, errors.New("paypal lookup: client id and secret are required")
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Rate <= 0 {
		opts.Rate = DefaultPayPalRPS
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &PayPal{
		base: strings.TrimRight(opts.APIBase, "/"), opts: opts, client: opts.HTTPClient,
		lim: newLimiter(opts.Rate),
	}
	// A token fetch is paced by the same bucket as the calls.
	p.tokens, err = paypaloauth.New(paypaloauth.Options{
		Base: p.base, ClientID: opts.ClientID, ClientSecret: opts.ClientSecret,
		Client: opts.HTTPClient, Timeout: opts.CallTimeout, Now: opts.Now, BeforeFetch: p.lim.Wait,
	})
	if err != nil {
		return nil, fmt.Errorf("paypal lookup: %w", err)
	}
	return p, nil
}

// paypalObject holds the fields of an order, capture or refund we read.
type paypalObject struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Amount *struct {
		CurrencyCode string `json:"currency_code"`
	} `json:"amount"`
}

// paypalKind is what the row's call creates: order, capture or refund.
func paypalKind(req *ledger.Request) string {
	path := ""
	if req != nil {
		path = req.Path
	}
	switch {
	case strings.HasSuffix(path, "/refund"):
		return "refund"
	case strings.HasPrefix(path, "/v2/payments/authorizations/") && strings.HasSuffix(path, "/capture"):
		return "capture"
	case strings.HasPrefix(path, "/v2/checkout/orders/"):
		return "order_action" // capture or authorize an order
	default:
		return "order"
	}
}

// PayPalOrdersRequest reports whether req goes to Orders v2 (an order, or
// its capture or authorization), whose PayPal-Request-Id PayPal forgets
// after 6 h (Payments v2: 45 days): a replay after that creates a second
// order. A claim with no request, or a path this package does not know,
// counts as one: the shorter window is the safe guess.
func PayPalOrdersRequest(req *ledger.Request) bool {
	switch paypalKind(req) {
	case "order", "order_action":
		return true
	}
	return false
}

// Retrieve reads the object named by the receipt id.
func (p *PayPal) Retrieve(ctx context.Context, row ledger.Row) (Finding, error) {
	id := row.UpstreamReceiptID
	if strings.ContainsAny(id, "/?#") {
		return Finding{}, &Error{Op: "paypal retrieve", Err: fmt.Errorf("bad receipt id %q", id)}
	}
	path := "/v2/checkout/orders/" + url.PathEscape(id)
	switch paypalKind(row.Request) {
	case "refund":
		path = "/v2/payments/refunds/" + url.PathEscape(id)
	case "capture":
		path = "/v2/payments/captures/" + url.PathEscape(id)
	}
	status, obj, err := p.do(ctx, "paypal retrieve", http.MethodGet, path, nil, nil)
	if err != nil {
		return Finding{}, err
	}
	if status == http.StatusNotFound {
		return Finding{}, nil
	}
	if status != http.StatusOK {
		return Finding{}, &Error{Op: "paypal retrieve", HTTPStatus: status, Err: errors.New(obj.issue())}
	}
	return paypalDecide(row, obj.paypalObject), nil
}

// Find: PayPal cannot look an object up by custom_id (VENDORS.md §2.8).
func (p *PayPal) Find(context.Context, ledger.Row) (Finding, error) {
	return Finding{}, ErrNoLookup
}

// Replay re-POSTs the stored request with PayPal-Request-Id = the row key.
func (p *PayPal) Replay(ctx context.Context, row ledger.Row) (Finding, error) {
	const op = "paypal replay"
	req := row.Request
	if req == nil || !strings.HasPrefix(req.Path, "/v") || strings.EqualFold(req.Method, http.MethodGet) {
		return Finding{}, &Error{Op: op, Err: errors.New("no replayable request stored")}
	}
	if len(row.Key) > maxPayPalRequestID {
		return Finding{}, &Error{Op: op, Err: fmt.Errorf("key longer than PayPal-Request-Id's %d characters", maxPayPalRequestID)}
	}
	h := http.Header{}
	h.Set("PayPal-Request-Id", row.Key)
	h.Set("Prefer", "return=representation")
	ct := req.ContentType
	if ct == "" {
		ct = "application/json"
	}
	h.Set("Content-Type", ct)
	method := strings.ToUpper(req.Method)
	if method == "" {
		method = http.MethodPost
	}
	status, obj, err := p.do(ctx, op, method, req.Path, []byte(req.Body), h)
	if err != nil {
		return Finding{}, err
	}
	switch {
	case status >= 200 && status < 300:
		f := paypalDecide(row, obj.paypalObject)
		if obj.ID == "" {
			f.Status = ledger.StatusSucceeded // accepted without a body
		}
		return f, nil
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		issue := obj.issue()
		if strings.Contains(issue, "DUPLICATE") {
			// Another request already did this (a duplicate invoice id, …):
			// that is not this request failing.
			return Finding{}, &Error{Op: op, HTTPStatus: status, Code: issue}
		}
		// PayPal answers a repeated request id with the original request's
		// result, so this refusal is the original's.
		return Finding{Status: ledger.StatusFailedPoison, Detail: fmt.Sprintf("replay answered %d %s", status, issue)}, nil
	default:
		return Finding{}, &Error{Op: op, HTTPStatus: status, Code: obj.issue()}
	}
}

// paypalAnswer is a PayPal response body: an object or an error.
type paypalAnswer struct {
	paypalObject
	Name    string `json:"name"`
	Details []struct {
		Issue string `json:"issue"`
	} `json:"details"`
}

func (a paypalAnswer) issue() string {
	if len(a.Details) > 0 && a.Details[0].Issue != "" {
		return a.Details[0].Issue
	}
	return a.Name
}

// do makes one paced, time-boxed call with the bearer token. 429, 5xx,
// 401 (the token is dropped) and network errors come back as retryable
// *Error; any other status is returned for the caller to judge.
func (p *PayPal) do(ctx context.Context, op, method, path string, body []byte, h http.Header) (int, paypalAnswer, error) {
	var ans paypalAnswer
	token, err := p.bearer(ctx)
	if err != nil {
		return 0, ans, err
	}
	if err := p.lim.Wait(ctx); err != nil {
		return 0, ans, &Error{Op: op, Retryable: true, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, ans, &Error{Op: op, Err: err}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, ans, &Error{Op: op, Retryable: true, Err: scrubURL(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPayPalBody))
	if err != nil {
		return 0, ans, &Error{Op: op, Retryable: true, Err: err}
	}
	_ = json.Unmarshal(raw, &ans) // an unparsable body leaves the fields empty
	s := resp.StatusCode
	switch {
	case s == http.StatusUnauthorized:
		p.tokens.Invalidate(token)
		return s, ans, &Error{Op: op, HTTPStatus: s, Retryable: true, Err: errors.New("token refused")}
	case s == http.StatusTooManyRequests || s == http.StatusConflict || s >= 500:
		e := &Error{Op: op, HTTPStatus: s, Retryable: true, Code: ans.issue()}
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
		return s, ans, e
	}
	return s, ans, nil
}

// bearer returns the OAuth token (paypaloauth: cached, renewed early,
// fetched by one caller at a time). A refusal of 429 or 5xx, a network
// error or a timeout is retryable; another refusal (a wrong secret) is not.
func (p *PayPal) bearer(ctx context.Context) (string, error) {
	const op = "paypal oauth token"
	tok, err := p.tokens.Token(ctx)
	var se *paypaloauth.StatusError
	switch {
	case err == nil:
		return tok, nil
	case errors.As(err, &se):
		return "", &Error{Op: op, HTTPStatus: se.Status, Retryable: se.Status == http.StatusTooManyRequests || se.Status >= 500}
	}
	return "", &Error{Op: op, Retryable: true, Err: err}
}

// scrubURL keeps a transport error's cause and drops the URL.
func scrubURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// paypalDecide maps a PayPal object's status to a finding.
//
//	order (create)     VOIDED → failed_poison; any other → succeeded (it exists)
//	order capture/auth COMPLETED → succeeded; VOIDED → failed_poison
//	capture            COMPLETED, (PARTIALLY_)REFUNDED → succeeded;
//	                   DECLINED, FAILED → failed_poison; PENDING → progress
//	refund             COMPLETED → succeeded; FAILED, CANCELLED → failed_poison
func paypalDecide(row ledger.Row, obj paypalObject) Finding {
	f := Finding{Found: obj.ID != "", ReceiptID: obj.ID, Detail: "paypal " + obj.Status}
	if obj.Amount != nil {
		f.Currency = obj.Amount.CurrencyCode
	}
	s := obj.Status
	switch paypalKind(row.Request) {
	case "order":
		if s == "VOIDED" {
			f.Status = ledger.StatusFailedPoison
		} else if s != "" {
			f.Status = ledger.StatusSucceeded
		}
	case "order_action":
		switch s {
		case "COMPLETED":
			f.Status = ledger.StatusSucceeded
		case "VOIDED":
			f.Status = ledger.StatusFailedPoison
		}
	case "capture":
		switch s {
		case "COMPLETED", "REFUNDED", "PARTIALLY_REFUNDED":
			f.Status = ledger.StatusSucceeded
		case "DECLINED", "FAILED":
			f.Status = ledger.StatusFailedPoison
		}
	case "refund":
		switch s {
		case "COMPLETED":
			f.Status = ledger.StatusSucceeded
		case "FAILED", "CANCELLED":
			f.Status = ledger.StatusFailedPoison
		}
	}
	return f
}
