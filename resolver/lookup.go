package resolver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Lookup is what the resolver needs of one vendor: the three moves of
// docs/architecture.md §7b. Implementations pace and time-box their own calls and
// return *Error for vendor failures, so the resolver can back off.
type Lookup interface {
	// Retrieve reads the object named by row.UpstreamReceiptID.
	Retrieve(ctx context.Context, row ledger.Row) (Finding, error)
	// Find looks the row up by its metadata_local_id (or the vendor's
	// equivalent). A vendor without such a lookup returns ErrNoLookup.
	Find(ctx context.Context, row ledger.Row) (Finding, error)
	// Replay sends row.Request again with the row key as the vendor's
	// idempotency key, explicitly, and reads the object from the answer.
	Replay(ctx context.Context, row ledger.Row) (Finding, error)
}

// Finding is what a lookup learned about a row's side effect.
type Finding struct {
	// Found is true when the vendor holds the object.
	Found bool
	// Status is the status the object's state points to; empty means it
	// exists but has not settled (progress: the receipt is stored, the row
	// stays open).
	Status    ledger.Status
	ReceiptID string
	// Amount (minor units) and Currency, when the object carries them, so
	// the ledger can check them against the row's expect.
	Amount   *int64
	Currency string
	// Replayed is the vendor's Idempotent-Replayed marker on a replay.
	Replayed bool
	// Duplicate is set by Find when more than one object carries the
	// row's local id: the duplicate already happened. The row is paged at
	// once and never replayed.
	Duplicate bool
	// Page is set by Replay when the vendor's answer means a human must
	// look (the key was used with another payload): the row is paged once
	// with this reason, stays open, and is never replayed again.
	Page string
	// Detail says in a few words what decided (for logs; no vendor secrets).
	Detail string
}

// ErrNoLookup is returned by Find when the vendor cannot be searched by our
// local id (PayPal): a replay with the same request id is then the lookup.
var ErrNoLookup = errors.New("vendor has no lookup by local id")

// Error is a vendor call that failed. Retryable errors (429, 5xx, network,
// timeouts) make the resolver back off the row and pause the vendor.
type Error struct {
	// Op names the call ("stripe search payment_intents").
	Op string
	// HTTPStatus is the vendor's status code; 0 for a network error.
	HTTPStatus int
	// Code is the vendor's error code, when it sent one.
	Code string
	// Retryable is true when the same call may succeed later.
	Retryable bool
	// RetryAfter is the vendor's hint (Retry-After), if any.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	s := e.Op
	if e.HTTPStatus != 0 {
		s += fmt.Sprintf(": http %d", e.HTTPStatus)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// retryable reports whether err is a vendor failure worth backing off for,
// and the vendor's Retry-After hint.
func retryable(err error) (bool, time.Duration) {
	var ve *Error
	if errors.As(err, &ve) {
		return ve.Retryable, ve.RetryAfter
	}
	// A context deadline on a vendor call is a timeout: retry later.
	return errors.Is(err, context.DeadlineExceeded), 0
}

// httpStatusOf returns the vendor status code carried by err, or 0.
func httpStatusOf(err error) int {
	var ve *Error
	if errors.As(err, &ve) {
		return ve.HTTPStatus
	}
	return 0
}
