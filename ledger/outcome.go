package ledger

import (
	"encoding/json"
	"net/textproto"
	"strings"
	"time"
	"unicode/utf8"
)

// OutcomeKind is what happened to one vendor call.
type OutcomeKind string

// The outcome kinds a runtime reports.
const (
	OutcomeResponse     OutcomeKind = "response"
	OutcomeTimeout      OutcomeKind = "timeout"
	OutcomeNetworkError OutcomeKind = "network_error"
)

// Vendor headers the classification reads (matched case-insensitively).
const (
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	HeaderStripeShouldRetry  = "Stripe-Should-Retry"
)

// Outcome is one attempt as the runtime saw it.
type Outcome struct {
	Kind       OutcomeKind
	HTTPStatus int
	ReceiptID  string
	Headers    map[string]string
	// Attempt is the row's attempt number the outcome is for (the claim
	// answer's row.attempt); 0 when the runtime does not say. A report for
	// an earlier attempt is applied, but leaves the lease of the attempt in
	// flight alone.
	Attempt int
	// Result is the answer as the runtime wants it replayed (Row.Result):
	// JSON text of at most MaxResultLen bytes, only with a response.
	Result string
	At     time.Time
}

// MaxResultLen caps Outcome.Result (and so Row.Result): 64 KiB keeps a
// row small enough to read on every claim.
const MaxResultLen = 64 << 10

// validateResult checks a result's size and that it is JSON text. Valid
// JSON holds no raw control character, NUL included, so PostgreSQL can
// store it; invalid UTF-8 would be replaced on encoding, and the result
// replayed would not be the one reported.
func validateResult(base *InvalidError, s string) error {
	switch {
	case len(s) > MaxResultLen:
		return base.With("result larger than %d bytes", MaxResultLen)
	case s != "" && (!utf8.ValidString(s) || !json.Valid([]byte(s))):
		return base.With("result must be JSON text in UTF-8")
	}
	return nil
}

// Validate checks the outcome's shape.
func (o Outcome) Validate() error {
	switch o.Kind {
	case OutcomeResponse:
		if o.HTTPStatus < 100 || o.HTTPStatus > 599 {
			return ErrInvalidOutcome.With("a response needs an http_status from 100 to 599")
		}
	case OutcomeTimeout, OutcomeNetworkError:
		if o.HTTPStatus != 0 {
			return ErrInvalidOutcome.With("%s has no http_status", o.Kind)
		}
		if o.Result != "" {
			return ErrInvalidOutcome.With("%s has no result", o.Kind)
		}
	default:
		return ErrInvalidOutcome.With("kind must be response, timeout or network_error")
	}
	if o.Attempt < 0 {
		return ErrInvalidOutcome.With("attempt must not be negative")
	}
	if !printableASCII(o.ReceiptID, 0, MaxKeyLen) {
		return ErrInvalidOutcome.With("receipt_id must be at most %d printable ASCII characters", MaxKeyLen)
	}
	if err := validateResult(ErrInvalidOutcome, o.Result); err != nil {
		return err
	}
	if len(o.Headers) > 64 {
		return ErrInvalidOutcome.With("too many headers")
	}
	// Two spellings of one header would leave Classify to pick one; the
	// runtime must say which answer it got.
	seen := make(map[string]bool, len(o.Headers))
	for k := range o.Headers {
		c := textproto.CanonicalMIMEHeaderKey(k)
		if seen[c] {
			return ErrInvalidOutcome.With("header %s given twice", c)
		}
		seen[c] = true
	}
	return nil
}

// header returns the value of the named header, matched case-insensitively.
// When two spellings are present (Validate refuses that) the smallest
// spelling wins, so Classify stays a function of its input, not of map order.
func (o Outcome) header(name string) (string, bool) {
	want := textproto.CanonicalMIMEHeaderKey(name)
	var key, val string
	found := false
	for k, v := range o.Headers {
		if textproto.CanonicalMIMEHeaderKey(k) == want && (!found || k < key) {
			key, val, found = k, v, true
		}
	}
	return strings.TrimSpace(val), found
}

// Classify turns a reported attempt into evidence, by the design's one
// policy for every runtime. An empty Status means the row stays pending.
//
//	2xx with receipt id, or Idempotent-Replayed: true  → succeeded
//	409 with a receipt ("already exists")              → succeeded
//	timeout, network error, 5xx, 408, 1xx/3xx          → unknown (never a new key)
//	429, or 409 without a receipt (key in use)         → stays pending
//	other 4xx                                          → failed_poison
//	Stripe-Should-Retry: false on an error             → failed_poison unless unknown
//
// A 2xx without a receipt is still a success: the vendor accepted the write.
// 408 and the odd 1xx/3xx are unknown rather than failed because the vendor
// may have committed; unknown is closed by evidence, never by a new key.
func Classify(o Outcome) Evidence {
	ev := Evidence{Source: SourceRuntime, ReceiptID: o.ReceiptID, At: o.At, HTTPStatus: o.HTTPStatus, Attempt: o.Attempt, Result: o.Result}
	if v, ok := o.header(HeaderIdempotentReplayed); ok {
		ev.Replayed = strings.EqualFold(v, "true")
	}
	if v, ok := o.header(HeaderStripeShouldRetry); ok {
		b := strings.EqualFold(v, "true")
		ev.ShouldRetry = &b
	}
	if o.Kind != OutcomeResponse {
		ev.Status = StatusUnknown
		return ev
	}
	s := o.HTTPStatus
	switch {
	case s >= 200 && s < 300:
		ev.Status = StatusSucceeded
		return ev
	case s >= 500, s == 408, s < 200, s >= 300 && s < 400:
		ev.Status = StatusUnknown
		return ev
	case s == 409 && o.ReceiptID != "":
		ev.Status = StatusSucceeded
		return ev
	}
	// 429, or 409 without a receipt: the vendor did not take this attempt;
	// the same key may be retried unless the vendor says not to.
	retryable := s == 429 || s == 409
	if ev.ShouldRetry != nil && !*ev.ShouldRetry {
		retryable = false
	}
	if retryable {
		if ev.ShouldRetry == nil {
			t := true
			ev.ShouldRetry = &t
		}
		ev.Status = ""
		return ev
	}
	ev.Status = StatusFailedPoison
	return ev
}
