package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/form"
	"golang.org/x/time/rate"

	"github.com/agentledger/reconciler/ledger"
)

// StripeOptions configure NewStripe.
type StripeOptions struct {
	// APIBase is stripe.api_base (default https://api.stripe.com); tests
	// point it at a fake or at stripe-mock.
	APIBase string
	// APIKey authenticates the lookups and replays: a secret, never logged.
	APIKey string
	// HTTPClient carries the calls (default: a client with no global
	// timeout; every call has CallTimeout).
	HTTPClient *http.Client
	// CallTimeout bounds one Stripe call (default 10 s).
	CallTimeout time.Duration
	// SearchRate and APIRate are the token buckets in requests per second
	// (defaults 20 and 100: Stripe's Search and global live limits).
	SearchRate, APIRate float64
	// MetadataKey is where our local id sits in metadata (default metadata_local_id).
	MetadataKey string
	// EventPages bounds the List Events fallback per row (default 5 pages of 100).
	EventPages int
	// Now is the clock (default time.Now), for the 30-day events window.
	Now func() time.Time
}

// Stripe defaults.
const (
	DefaultStripeAPIBase   = "https://api.stripe.com"
	DefaultCallTimeout     = 10 * time.Second
	DefaultStripeSearchRPS = 20
	DefaultStripeAPIRPS    = 100
	stripeEventsWindow     = 30 * 24 * time.Hour
	// searchOffFor is how long Search stays off after Stripe said it is
	// unavailable to the account (then it is tried again).
	searchOffFor = time.Hour
)

// Stripe is the Stripe lookup: stripe-go v79's backend pointed at
// api_base, with its own retries off (the resolver paces and retries) and
// the key passed per call (never stripe.Key, the global).
type Stripe struct {
	backend stripe.Backend
	key     string
	opts    StripeOptions
	search  *rate.Limiter
	api     *rate.Limiter

	mu        sync.Mutex
	searchOff time.Time // Search unavailable to this account until then
}

var _ Lookup = (*Stripe)(nil)

// NewStripe returns the Stripe lookup.
func NewStripe(opts StripeOptions) (*Stripe, error) {
	if opts.APIBase == "" {
		opts.APIBase = DefaultStripeAPIBase
	}
	if u, err := url.Parse(opts.APIBase); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, errors.New("stripe lookup: api_base must be an absolute http(s) URL")
	}
	if opts.APIKey == "" {
		return nil, errors.New("stripe lookup: api key is required")
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.SearchRate <= 0 {
		opts.SearchRate = DefaultStripeSearchRPS
	}
	if opts.APIRate <= 0 {
		opts.APIRate = DefaultStripeAPIRPS
	}
	if opts.MetadataKey == "" {
		opts.MetadataKey = "metadata_local_id"
	}
	if opts.EventPages <= 0 {
		opts.EventPages = 5
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(opts.APIBase),
		HTTPClient:        opts.HTTPClient,
		MaxNetworkRetries: stripe.Int64(0),
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return &Stripe{
		backend: backend, key: opts.APIKey, opts: opts,
		search: newLimiter(opts.SearchRate),
		api:    newLimiter(opts.APIRate),
	}, nil
}

// stripeObject holds the fields of any Stripe object the resolver reads.
type stripeObject struct {
	stripe.APIResource
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Status           string            `json:"status"`
	Amount           *int64            `json:"amount"`
	Currency         string            `json:"currency"`
	Metadata         map[string]string `json:"metadata"`
	LastPaymentError json.RawMessage   `json:"last_payment_error"`
	Deleted          bool              `json:"deleted"`
}

type stripeList struct {
	stripe.APIResource
	Data     []stripeObject `json:"data"`
	HasMore  bool           `json:"has_more"`
	NextPage *string        `json:"next_page"`
}

type stripeEventList struct {
	stripe.APIResource
	Data []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Request *struct {
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"request"`
		Data struct {
			Object stripeObject `json:"object"`
		} `json:"data"`
	} `json:"data"`
	HasMore bool `json:"has_more"`
}

// searchable are the resources Stripe Search covers (of those we create).
var searchable = map[string]bool{
	"payment_intents": true, "charges": true, "customers": true, "invoices": true, "subscriptions": true,
}

// eventTypes are the List Events filters of the fallback, per resource.
var eventTypes = map[string][]string{
	"payment_intents": {"payment_intent.created", "payment_intent.succeeded", "payment_intent.payment_failed",
		"payment_intent.canceled", "payment_intent.processing", "payment_intent.requires_action", "payment_intent.amount_capturable_updated"},
	"charges":       {"charge.succeeded", "charge.failed", "charge.pending"},
	"customers":     {"customer.created"},
	"invoices":      {"invoice.created", "invoice.finalized", "invoice.paid"},
	"subscriptions": {"customer.subscription.created"},
	"refunds":       {"refund.created", "refund.updated"},
}

// idPrefixes name the resource of a receipt id.
var idPrefixes = []struct{ prefix, resource string }{
	{"pi_", "payment_intents"}, {"ch_", "charges"}, {"py_", "charges"}, {"cus_", "customers"},
	{"in_", "invoices"}, {"sub_", "subscriptions"}, {"re_", "refunds"}, {"pyr_", "refunds"},
}

// stripeResource is the resource the row's call created: the first path
// segment after /v1/ of the stored request, else a resource named in the tool.
func stripeResource(row ledger.Row) string {
	if row.Request != nil {
		p := strings.TrimPrefix(row.Request.Path, "/v1/")
		if p != row.Request.Path {
			seg, _, _ := strings.Cut(p, "/")
			seg, _, _ = strings.Cut(seg, "?")
			return seg
		}
	}
	tool := strings.ToLower(row.Tool)
	for _, c := range []struct{ word, resource string }{
		{"refund", "refunds"}, {"payment_intent", "payment_intents"}, {"paymentintent", "payment_intents"},
		{"subscription", "subscriptions"}, {"invoice", "invoices"}, {"customer", "customers"}, {"charge", "charges"},
	} {
		if strings.Contains(tool, c.word) {
			return c.resource
		}
	}
	return ""
}

// Retrieve reads the object named by the row's receipt id.
func (s *Stripe) Retrieve(ctx context.Context, row ledger.Row) (Finding, error) {
	id := row.UpstreamReceiptID
	res := stripeResource(row)
	for _, p := range idPrefixes {
		if strings.HasPrefix(id, p.prefix) {
			res = p.resource
			break
		}
	}
	if res == "" || strings.ContainsAny(id, "/?#") {
		return Finding{}, &Error{Op: "stripe retrieve", Err: fmt.Errorf("cannot tell the resource of receipt %q", id)}
	}
	obj, err := s.get(ctx, res, id)
	if err != nil || obj == nil {
		return Finding{}, err
	}
	return s.decide(row, *obj), nil
}

// get retrieves one object; a missing object is (nil, nil).
func (s *Stripe) get(ctx context.Context, res, id string) (*stripeObject, error) {
	op := "stripe retrieve " + res
	if err := s.api.Wait(ctx); err != nil {
		return nil, &Error{Op: op, Retryable: true, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	var obj stripeObject
	err := s.backend.Call(http.MethodGet, "/v1/"+res+"/"+url.PathEscape(id), s.key, &stripe.Params{Context: ctx}, &obj)
	if err != nil {
		if stripeStatus(err) == http.StatusNotFound {
			return nil, nil
		}
		return nil, stripeErr(op, err)
	}
	return &obj, nil
}

// Find looks the row up by metadata_local_id: Search on searchable
// resources, a list of the parent's refunds for refunds, List Events where
// Search is unavailable or does not cover the resource.
func (s *Stripe) Find(ctx context.Context, row ledger.Row) (Finding, error) {
	res := stripeResource(row)
	if res == "refunds" {
		if parent, val := refundParent(row); parent != "" {
			return s.findRefund(ctx, row, parent, val)
		}
	}
	if searchable[res] && !s.searchDisabled() {
		f, err := s.searchFor(ctx, row, res)
		if !errors.Is(err, errSearchUnavailable) {
			return f, err
		}
	}
	return s.findInEvents(ctx, row, res)
}

var errSearchUnavailable = errors.New("stripe search unavailable for this account")

func (s *Stripe) searchDisabled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Now().Before(s.searchOff)
}

// searchFor runs Search on res for the row's local id.
func (s *Stripe) searchFor(ctx context.Context, row ledger.Row, res string) (Finding, error) {
	op := "stripe search " + res
	if err := s.search.Wait(ctx); err != nil {
		return Finding{}, &Error{Op: op, Retryable: true, Err: err}
	}
	if err := s.api.Wait(ctx); err != nil {
		return Finding{}, &Error{Op: op, Retryable: true, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	params := &stripe.SearchParams{
		Context: ctx,
		Query:   fmt.Sprintf("metadata['%s']:'%s'", s.opts.MetadataKey, row.MetadataLocalID),
		Limit:   stripe.Int64(10),
	}
	var list stripeList
	if err := s.list(res+"/search", params, &list); err != nil {
		if searchUnavailable(err) {
			s.mu.Lock()
			s.searchOff = s.opts.Now().Add(searchOffFor)
			s.mu.Unlock()
			return Finding{}, errSearchUnavailable
		}
		return Finding{}, stripeErr(op, err)
	}
	for _, obj := range list.Data {
		if obj.Metadata[s.opts.MetadataKey] == row.MetadataLocalID {
			return s.decide(row, obj), nil
		}
	}
	return Finding{}, nil
}

// list GETs a search or list endpoint. stripe-go's own iterators encode
// list params and call CallRaw the same way (Call's reflection expects a
// Metadata field that list and search params lack).
func (s *Stripe) list(res string, params stripe.ParamsContainer, v stripe.LastResponseSetter) error {
	fv := &form.Values{}
	form.AppendTo(fv, params)
	return s.backend.CallRaw(http.MethodGet, "/v1/"+res, s.key, fv, params.GetParams(), v)
}

// searchUnavailable recognises Stripe's refusal to search for this
// account (India, or the feature not enabled): a 400/404 whose message
// says search is not available.
func searchUnavailable(err error) bool {
	var se *stripe.Error
	if !errors.As(err, &se) || (se.HTTPStatusCode != http.StatusBadRequest && se.HTTPStatusCode != http.StatusNotFound) {
		return false
	}
	m := strings.ToLower(se.Msg)
	return strings.Contains(m, "search") &&
		(strings.Contains(m, "not available") || strings.Contains(m, "unavailable") ||
			strings.Contains(m, "not enabled") || strings.Contains(m, "not supported"))
}

// refundParent reads the refund's parent from the stored form body.
func refundParent(row ledger.Row) (string, string) {
	if row.Request == nil {
		return "", ""
	}
	q, err := url.ParseQuery(row.Request.Body)
	if err != nil {
		return "", ""
	}
	if v := q.Get("payment_intent"); v != "" {
		return "payment_intent", v
	}
	if v := q.Get("charge"); v != "" {
		return "charge", v
	}
	return "", ""
}

// findRefund lists the parent's refunds (read-after-write, unlike Search)
// and matches our local id in their metadata.
func (s *Stripe) findRefund(ctx context.Context, row ledger.Row, parent, id string) (Finding, error) {
	const op = "stripe list refunds"
	var after *string
	for range s.opts.EventPages {
		if err := s.api.Wait(ctx); err != nil {
			return Finding{}, &Error{Op: op, Retryable: true, Err: err}
		}
		cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		params := &stripe.RefundListParams{ListParams: stripe.ListParams{Context: cctx, Limit: stripe.Int64(100), StartingAfter: after}}
		if parent == "payment_intent" {
			params.PaymentIntent = stripe.String(id)
		} else {
			params.Charge = stripe.String(id)
		}
		var list stripeList
		err := s.list("refunds", params, &list)
		cancel()
		if err != nil {
			return Finding{}, stripeErr(op, err)
		}
		for _, obj := range list.Data {
			if obj.Metadata[s.opts.MetadataKey] == row.MetadataLocalID {
				return s.decide(row, obj), nil
			}
		}
		if !list.HasMore || len(list.Data) == 0 {
			break
		}
		after = stripe.String(list.Data[len(list.Data)-1].ID)
	}
	return Finding{}, nil
}

// findInEvents is the fallback where Search is unavailable: List Events of
// the resource's types since the row was claimed (Stripe keeps 30 days),
// newest first, matching our local id in the object's metadata or our key
// in request.idempotency_key; the object found is then retrieved, so its
// current state decides.
func (s *Stripe) findInEvents(ctx context.Context, row ledger.Row, res string) (Finding, error) {
	const op = "stripe list events"
	since := row.FirstSeenAt.Add(-time.Hour)
	if floor := s.opts.Now().Add(-stripeEventsWindow + time.Hour); since.Before(floor) {
		since = floor
	}
	var after *string
	for range s.opts.EventPages {
		if err := s.api.Wait(ctx); err != nil {
			return Finding{}, &Error{Op: op, Retryable: true, Err: err}
		}
		cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		params := &stripe.EventListParams{
			ListParams:   stripe.ListParams{Context: cctx, Limit: stripe.Int64(100), StartingAfter: after},
			CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()},
		}
		if types := eventTypes[res]; len(types) > 0 {
			params.Types = stripe.StringSlice(types)
		}
		var list stripeEventList
		err := s.list("events", params, &list)
		cancel()
		if err != nil {
			return Finding{}, stripeErr(op, err)
		}
		for _, ev := range list.Data {
			obj := ev.Data.Object
			byKey := ev.Request != nil && ev.Request.IdempotencyKey == row.Key
			if obj.Metadata[s.opts.MetadataKey] != row.MetadataLocalID && !byKey {
				continue
			}
			if r := resourceOfObject(obj.Object); r != "" && obj.ID != "" {
				cur, err := s.get(ctx, r, obj.ID)
				if err != nil {
					return Finding{}, err
				}
				if cur != nil {
					obj = *cur
				}
			}
			return s.decide(row, obj), nil
		}
		if !list.HasMore || len(list.Data) == 0 {
			break
		}
		after = stripe.String(list.Data[len(list.Data)-1].ID)
	}
	return Finding{}, nil
}

func resourceOfObject(object string) string {
	switch object {
	case "payment_intent":
		return "payment_intents"
	case "charge":
		return "charges"
	case "customer":
		return "customers"
	case "invoice":
		return "invoices"
	case "subscription":
		return "subscriptions"
	case "refund":
		return "refunds"
	}
	return ""
}

// Replay sends the stored request again with Idempotency-Key set
// explicitly to the row key — stripe-go mints a random key when none is
// set, which would turn the replay into a second operation.
func (s *Stripe) Replay(ctx context.Context, row ledger.Row) (Finding, error) {
	const op = "stripe replay"
	req := row.Request
	if req == nil {
		return Finding{}, &Error{Op: op, Err: errors.New("no request stored")}
	}
	if ct := req.ContentType; ct != "" && !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		return Finding{}, &Error{Op: op, Err: fmt.Errorf("cannot replay content type %q", ct)}
	}
	method := strings.ToUpper(req.Method)
	if method == "" {
		method = http.MethodPost
	}
	if method == http.MethodGet || !strings.HasPrefix(req.Path, "/v1/") {
		return Finding{}, &Error{Op: op, Err: fmt.Errorf("cannot replay %s %s", method, req.Path)}
	}
	body, err := formBody(req.Body)
	if err != nil {
		return Finding{}, &Error{Op: op, Err: err}
	}
	if err := s.api.Wait(ctx); err != nil {
		return Finding{}, &Error{Op: op, Retryable: true, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	var obj stripeObject
	err = s.backend.CallRaw(method, req.Path, s.key, body, &stripe.Params{Context: ctx, IdempotencyKey: stripe.String(row.Key)}, &obj)
	if err != nil {
		return s.replayError(row, err)
	}
	f := s.decide(row, obj)
	f.Found = obj.ID != ""
	if obj.LastResponse != nil {
		f.Replayed = strings.EqualFold(obj.LastResponse.Header.Get(ledger.HeaderIdempotentReplayed), "true")
	}
	if !f.Found {
		// A 2xx without an object id: the vendor took the write.
		f.Status = ledger.StatusSucceeded
	}
	return f, nil
}

// replayError turns a Stripe error answer to a replay into evidence or an
// error, by the outcome policy: 429, 409 (key in use) and 5xx are retryable
// errors (a 5xx was stored by Stripe and must not be replayed again); an
// idempotency_error (the stored request differs) decides nothing; any
// other 4xx is the vendor refusing this very request: failed_poison.
func (s *Stripe) replayError(row ledger.Row, err error) (Finding, error) {
	const op = "stripe replay"
	var se *stripe.Error
	if !errors.As(err, &se) {
		return Finding{}, stripeErr(op, err)
	}
	code := se.HTTPStatusCode
	shouldRetry := ""
	if se.LastResponse != nil {
		shouldRetry = strings.ToLower(se.LastResponse.Header.Get(ledger.HeaderStripeShouldRetry))
	}
	switch {
	case code == http.StatusTooManyRequests, code == http.StatusConflict, code >= 500, shouldRetry == "true":
		return Finding{}, stripeErr(op, err)
	case se.Type == stripe.ErrorTypeIdempotency:
		return Finding{}, &Error{Op: op, HTTPStatus: code, Code: string(se.Code), Err: errors.New("idempotency_error: the stored request differs")}
	case code >= 400:
		return Finding{Found: false, Status: ledger.StatusFailedPoison,
			Detail: fmt.Sprintf("replay answered %d %s", code, se.Code)}, nil
	}
	return Finding{}, stripeErr(op, err)
}

// formBody parses a stored form body keeping the order of its fields.
func formBody(body string) (*form.Values, error) {
	v := &form.Values{}
	if body == "" {
		return v, nil
	}
	for _, part := range strings.Split(body, "&") {
		if part == "" {
			continue
		}
		k, val, _ := strings.Cut(part, "=")
		ku, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("stored body: %w", err)
		}
		vu, err := url.QueryUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("stored body: %w", err)
		}
		v.Add(ku, vu)
	}
	return v, nil
}

// decide maps a Stripe object's state to a finding.
//
//	payment_intent  succeeded, requires_capture (authorised) → succeeded;
//	                canceled, or requires_payment_method after a failed
//	                attempt → failed_poison; otherwise progress
//	charge          succeeded → succeeded; failed → failed_poison
//	refund          succeeded → succeeded; failed, canceled → failed_poison
//	subscription    incomplete_expired → failed_poison; incomplete → progress;
//	                otherwise (created) succeeded
//	invoice         a /pay call: paid → succeeded; a create: it exists
//	customer, …     it exists → succeeded
func (s *Stripe) decide(row ledger.Row, obj stripeObject) Finding {
	f := Finding{Found: true, ReceiptID: obj.ID, Detail: obj.Object + " " + obj.Status}
	switch obj.Object {
	case "payment_intent", "charge", "refund":
		f.Amount, f.Currency = obj.Amount, obj.Currency
	}
	failedAttempt := len(obj.LastPaymentError) > 0 && string(obj.LastPaymentError) != "null"
	switch obj.Object {
	case "payment_intent":
		switch {
		case obj.Status == "succeeded" || obj.Status == "requires_capture":
			f.Status = ledger.StatusSucceeded
		case obj.Status == "canceled", obj.Status == "requires_payment_method" && failedAttempt:
			f.Status = ledger.StatusFailedPoison
		}
	case "charge":
		switch obj.Status {
		case "succeeded":
			f.Status = ledger.StatusSucceeded
		case "failed":
			f.Status = ledger.StatusFailedPoison
		}
	case "refund":
		switch obj.Status {
		case "succeeded":
			f.Status = ledger.StatusSucceeded
		case "failed", "canceled":
			f.Status = ledger.StatusFailedPoison
		}
	case "subscription":
		switch obj.Status {
		case "incomplete_expired":
			f.Status = ledger.StatusFailedPoison
		case "incomplete":
		default:
			f.Status = ledger.StatusSucceeded
		}
	case "invoice":
		if row.Request != nil && strings.HasSuffix(row.Request.Path, "/pay") {
			if obj.Status == "paid" {
				f.Status = ledger.StatusSucceeded
			}
		} else {
			f.Status = ledger.StatusSucceeded
		}
	default:
		f.Status = ledger.StatusSucceeded
	}
	return f
}

// stripeStatus is the HTTP status of a Stripe error answer, or 0.
func stripeStatus(err error) int {
	var se *stripe.Error
	if errors.As(err, &se) {
		return se.HTTPStatusCode
	}
	return 0
}

// stripeErr wraps a stripe-go error as *Error: 429, 409, 5xx, network
// errors and timeouts are retryable, honouring Stripe-Should-Retry.
func stripeErr(op string, err error) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return &Error{Op: op, Retryable: true, Err: err}
	}
	code := se.HTTPStatusCode
	e := &Error{Op: op, HTTPStatus: code, Code: string(se.Code), Err: errors.New(se.Msg),
		Retryable: code == http.StatusTooManyRequests || code == http.StatusConflict || code >= 500}
	if se.LastResponse != nil {
		switch strings.ToLower(se.LastResponse.Header.Get(ledger.HeaderStripeShouldRetry)) {
		case "true":
			e.Retryable = true
		case "false":
			e.Retryable = false
		}
		if n, err := strconv.Atoi(se.LastResponse.Header.Get("Retry-After")); err == nil && n > 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return e
}

// newLimiter paces calls at perSec with a burst of one: a vendor limit such
// as Stripe Search's 20 requests per second holds over any one-second
// window (a burst of a second's worth let a fresh bucket send twice the
// limit in the first second). The limit is per process: replicas that share
// a vendor account share its limit between them.
func newLimiter(perSec float64) *rate.Limiter { return rate.NewLimiter(rate.Limit(perSec), 1) }
