package ledger

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Callers branch on them with errors.Is; the HTTP layer maps
// each one to a status code in one place.
var (
	// ErrNotFound means no row exists for the tenant and key.
	ErrNotFound = errors.New("not found")
	// ErrFingerprintMismatch means a caller-supplied key is already held by a
	// different intent.
	ErrFingerprintMismatch = errors.New("key already used for a different intent")
	// ErrInvalidTransition means the rules forbid the requested status change.
	// It is a conflict with stored state, not invalid input: it does not
	// match ErrInvalid.
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrCompensationPending means the original row is still pending or unknown,
	// so compensating it could undo a side effect that has not happened.
	ErrCompensationPending = errors.New("original is still pending or unknown")
	// ErrCompensationFailed means the original row failed, so there is nothing to compensate.
	ErrCompensationFailed = errors.New("original failed; nothing to compensate")
	// ErrUnavailable means the store cannot serve the call right now (closed,
	// disk error, lost connection); the caller may retry later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrToolNotFound means the tenant's registry has no such tool. It
	// matches ErrNotFound.
	ErrToolNotFound = fmt.Errorf("%w: no such tool", ErrNotFound)
)

// ErrInvalid is matched by every *InvalidError: the input was refused
// before anything was stored. It is the one test for invalid input, so a
// new kind of invalid input needs no change in any caller.
var ErrInvalid = errors.New("invalid input")

// The invalid inputs callers may tell apart. Each is an *InvalidError, so
// errors.Is matches it and ErrInvalid; a detailed error made with With
// matches both too.
var (
	ErrInvalidRunID       = &InvalidError{Field: "run_id", Reason: "want 1-128 of [A-Za-z0-9_-]"}
	ErrInvalidTool        = &InvalidError{Field: "tool", Reason: "want 1-128 of [A-Za-z0-9_.-]"}
	ErrInvalidToolCallID  = &InvalidError{Field: "tool_call_id", Reason: "want at most 255 printable ASCII characters"}
	ErrInvalidTraceparent = &InvalidError{Field: "traceparent", Reason: "want a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lower case, ids not all zero"}
	ErrInvalidVendor      = &InvalidError{Field: "vendor", Reason: "want 1-64 of [a-z0-9_-]"}
	ErrInvalidToolClass   = &InvalidError{Field: "tool_class", Reason: "want write_idempotent, write_ledger or write_irreversible"}
	ErrInvalidKey         = &InvalidError{Field: "key", Reason: "want 1-255 printable ASCII characters"}
	ErrInvalidTenant      = &InvalidError{Field: "tenant", Reason: "want 1-128 of [A-Za-z0-9_-]"}
	ErrInvalidIntent      = &InvalidError{Field: "intent", Reason: "want a JSON object"}
	ErrInvalidRequest     = &InvalidError{Field: "request envelope"}
	ErrInvalidExpect      = &InvalidError{Field: "expect", Reason: "want a non-negative amount and a 3-letter currency"}
	ErrInvalidOutcome     = &InvalidError{Field: "outcome"}
	ErrInvalidStatus      = &InvalidError{Field: "status"}
	ErrInvalidAction      = &InvalidError{Field: "compensation action", Reason: "want 1-128 of [A-Za-z0-9_.-]"}
	ErrInvalidEvidence    = &InvalidError{Field: "evidence"}
	ErrInvalidListQuery   = &InvalidError{Field: "list query"}
	ErrInvalidDelivery    = &InvalidError{Field: "delivery"}
	// ErrReplayedToken refuses a delivery whose signature token
	// (Delivery.ReplayToken) was recorded with another event: a signature
	// replayed onto a forged body.
	ErrReplayedToken = &InvalidError{Field: "delivery", Reason: "signature token already used by another event"}
	// ErrInvalidFreeze rejects a kill-switch entry (or the tenant and
	// target of a delete).
	ErrInvalidFreeze = &InvalidError{Field: "freeze"}
)

// InvalidError is input the ledger refuses: which part (Field, as the
// caller names it: run_id, list query) and why (Reason). Its text is built
// from the ledger's constant text and the caller's own input only, so it
// may be shown to the caller; anything a store wraps around it may not.
type InvalidError struct {
	Field  string
	Reason string
	// of is the error this one details (With); nil for the sentinels.
	of *InvalidError
	// missing: the field was absent or empty (Missing).
	missing bool
}

// Error reads "invalid <field>: <reason>", or "missing <field>".
func (e *InvalidError) Error() string {
	if e.missing {
		return "missing " + e.Field
	}
	if e.Reason == "" {
		return "invalid " + e.Field
	}
	return "invalid " + e.Field + ": " + e.Reason
}

// Is matches ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the error e details, so a detailed error still matches its
// sentinel.
func (e *InvalidError) Unwrap() error {
	if e.of == nil {
		return nil
	}
	return e.of
}

// Missing returns e for a field the input left out (or empty): it reads
// "missing <field>" and matches e.
func (e *InvalidError) Missing() *InvalidError {
	return &InvalidError{Field: e.Field, of: e, missing: true}
}

// InvalidErrors are every problem of one input (a claim's body), in the
// order of its fields, so a caller fixes them at once rather than one a
// request. It matches ErrInvalid and each of its errors.
type InvalidErrors []*InvalidError

// Error reads the problems joined by "; ".
func (es InvalidErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Is matches ErrInvalid.
func (es InvalidErrors) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the problems.
func (es InvalidErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// joinInvalid is nil for no problems, the one problem, or InvalidErrors.
func joinInvalid(es []*InvalidError) error {
	switch len(es) {
	case 0:
		return nil
	case 1:
		return es[0]
	}
	return InvalidErrors(es)
}

// With returns e with a detail: the same Field, the detail appended to the
// Reason. The detail may quote the caller's input, never internal text (a
// store's, a driver's), which belongs in a wrapping fmt.Errorf instead.
func (e *InvalidError) With(format string, args ...any) *InvalidError {
	reason := fmt.Sprintf(format, args...)
	if e.Reason != "" {
		reason = e.Reason + ": " + reason
	}
	return &InvalidError{Field: e.Field, Reason: reason, of: e}
}
