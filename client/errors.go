package client

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// Sentinels for the API's error codes, matched with errors.Is on an *Error.
// Where the ledger has the same sentinel, the client reuses it, so a caller
// may write errors.Is(err, ledger.ErrNotFound) as well.
var (
	ErrNotFound            = ledger.ErrNotFound            // 404 not_found
	ErrFingerprintMismatch = ledger.ErrFingerprintMismatch // 422 fingerprint_mismatch
	ErrCompensationPending = ledger.ErrCompensationPending // 409 compensation_pending
	ErrCompensationFailed  = ledger.ErrCompensationFailed  // 422 compensation_failed
	ErrInvalidTransition   = ledger.ErrInvalidTransition   // 409 invalid_transition
	ErrUnavailable         = ledger.ErrUnavailable         // 503 unavailable (and a 502/504 from a proxy)
	ErrNotQueued           = ledger.ErrNotQueued           // 409 not_queued: a start of a row not queued for a worker
	ErrApprovalDecided     = ledger.ErrApprovalDecided     // 409 approval_decided
	ErrApprovalExpired     = ledger.ErrApprovalExpired     // 409 approval_expired
	ErrRequestRequired     = ledger.ErrRequestRequired     // 422 request_required: an outbox tool's claim needs the request envelope

	ErrInvalidInput     = errors.New("invalid input")             // 400 bad_json, invalid_input, bad_body
	ErrUnauthorized     = errors.New("unauthorized")              // 401 unauthorized
	ErrForbidden        = errors.New("forbidden")                 // 403 forbidden
	ErrBodyTooLarge     = errors.New("request body too large")    // 413 body_too_large
	ErrMethodNotAllowed = errors.New("method not allowed")        // 405 method_not_allowed
	ErrInternal         = errors.New("internal error of the API") // 500 internal
)

// Sentinels for what Do ends with.
var (
	// ErrStopped is matched by every *StopError: the ledger said do not call.
	ErrStopped = errors.New("stopped by the ledger")
	// ErrUnsettled is matched by every *UnsettledError: the call's side
	// effect is not known. The row stays pending or unknown until the
	// resolver, a webhook or a retry with the same key settles it. Never call
	// the vendor again under a new key. A *QueuedError and an
	// *AwaitingApprovalError match it too (as the Python and TypeScript
	// clients' QueuedError is an Unsettled, and their do() ends an
	// approval wait with one): the row is open and the call is not this
	// agent's to make now, so a runtime that parks the run on "not known
	// yet" parks it on those as well.
	ErrUnsettled = errors.New("side effect not settled")
	// ErrReportFailed means the outcome report could not be delivered after
	// its retries; the row stays pending for the resolver.
	ErrReportFailed = errors.New("outcome report failed")
	// ErrEscalated means a human was paged for the key (its replay window
	// closed while the row was open).
	ErrEscalated = errors.New("escalated to a human")
	// ErrAwaitingApproval is matched by every *AwaitingApprovalError: the
	// call waits for a human's approval and nothing was called.
	ErrAwaitingApproval = errors.New("awaiting approval")
	// ErrQueued is matched by every *QueuedError: the call was queued for
	// the runtime's outbox worker, which makes it; the agent calls nothing.
	ErrQueued = errors.New("queued for the outbox worker")
)

// codeSentinels maps each API error code to its sentinel.
var codeSentinels = map[string]error{
	apierror.CodeNotFound:            ErrNotFound,
	apierror.CodeFingerprintMismatch: ErrFingerprintMismatch,
	apierror.CodeCompensationPending: ErrCompensationPending,
	apierror.CodeCompensationFailed:  ErrCompensationFailed,
	apierror.CodeInvalidTransition:   ErrInvalidTransition,
	apierror.CodeNotQueued:           ErrNotQueued,
	apierror.CodeApprovalDecided:     ErrApprovalDecided,
	apierror.CodeApprovalExpired:     ErrApprovalExpired,
	apierror.CodeRequestRequired:     ErrRequestRequired,
	apierror.CodeUnavailable:         ErrUnavailable,
	apierror.CodeBadJSON:             ErrInvalidInput,
	apierror.CodeBadBody:             ErrInvalidInput,
	apierror.CodeInvalidInput:        ErrInvalidInput,
	apierror.CodeUnauthorized:        ErrUnauthorized,
	apierror.CodeForbidden:           ErrForbidden,
	apierror.CodeBodyTooLarge:        ErrBodyTooLarge,
	apierror.CodeMethodNotAllowed:    ErrMethodNotAllowed,
	apierror.CodeInternal:            ErrInternal,
}

// Error is an error answer of the API (an apierror.Body) and its HTTP
// status. Match it with errors.Is against the sentinels above, or
// errors.As for the code and message.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("reconciler api: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches the sentinel of e's code. A 502/503/504 whose body was not the
// API's (a proxy in front of it) is ErrUnavailable too: it is as retryable.
func (e *Error) Is(target error) bool {
	if s, ok := codeSentinels[e.Code]; ok && s == target {
		return true
	}
	if target == ErrUnavailable {
		switch e.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// retryable reports whether the same request may be sent again: the API
// (or a proxy in front of it) was unavailable, overloaded or failed inside.
func (e *Error) retryable() bool {
	// idempotency_key_in_flight: the first send of this call is still
	// being answered; the resend (same value) gets its answer.
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 || e.Code == apierror.CodeIdempotencyKeyInFlight
}

// StopError is Do's answer when the ledger says not to call the vendor:
// Code ledger.CodeFailedPoison (the vendor refused this intent; a new intent
// needs a new key) or ledger.CodeToolFrozen (the kill switch covers the tool).
// It matches ErrStopped.
type StopError struct {
	Code string
	Key  string
	// Row is the row that stopped the call; nil for a frozen tool with no row.
	Row *ledger.Row
	// Err is the vendor call's own error when this Do made the call that failed.
	Err error
}

func (e *StopError) Error() string {
	msg := "reconciler: stop: " + e.Code
	if e.Key != "" {
		msg += " (key " + e.Key + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrStopped.
func (e *StopError) Is(target error) bool { return target == ErrStopped }

// Unwrap returns the vendor call's error, if any.
func (e *StopError) Unwrap() error { return e.Err }

// UnsettledError is Do's answer when the side effect's fate is not known:
// the vendor timed out, the connection broke, it answered 5xx, 429 or a 409
// for a key in use, or the report itself could not be delivered. Status is
// the row's status as last seen (pending or unknown; empty when the report
// never arrived). It matches ErrUnsettled.
type UnsettledError struct {
	Key    string
	Status ledger.Status
	Err    error
}

func (e *UnsettledError) Error() string {
	msg := "reconciler: key " + e.Key + " not settled"
	if e.Status != "" {
		msg += " (row " + string(e.Status) + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrUnsettled.
func (e *UnsettledError) Is(target error) bool { return target == ErrUnsettled }

// Unwrap returns the cause: the vendor call's error or the report's.
func (e *UnsettledError) Unwrap() error { return e.Err }

// AwaitingApprovalError is Do's answer when its ctx ended while the call
// waited for a human's approval: nothing was called, and the row stays
// pending at attempt 0 with its approval requested until a human decides
// or the request expires. A later Do of the same intent (the same key)
// picks the wait up again. It matches ErrAwaitingApproval and ErrUnsettled;
// Err is ctx's error.
type AwaitingApprovalError struct {
	Key        string
	ApprovalID string
	Row        ledger.Row
	Err        error
}

func (e *AwaitingApprovalError) Error() string {
	msg := "reconciler: key " + e.Key + " awaits approval " + e.ApprovalID
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrAwaitingApproval and ErrUnsettled.
func (e *AwaitingApprovalError) Is(target error) bool {
	return target == ErrAwaitingApproval || target == ErrUnsettled
}

// Unwrap returns ctx's error.
func (e *AwaitingApprovalError) Unwrap() error { return e.Err }

// QueuedError is Do's answer for an outbox tool's call (decision queued):
// the runtime's Worker makes the call, and this agent must not. The row
// (pending at attempt 0 while the work item waits) settles when the
// worker reports; a Do of the same intent on a client WithWaitQueued waits
// for that and returns the receipt, as does reading the row (Get) or
// waiting for the key's resolution event on run RunID. Err is set when
// Do waited (WithWaitQueued) and its ctx ended first. It matches ErrQueued
// and ErrUnsettled: the row is open, and it must never be called under a
// new key.
type QueuedError struct {
	Key   string
	RunID string
	Row   ledger.Row
	Err   error
}

func (e *QueuedError) Error() string {
	msg := "reconciler: key " + e.Key + " queued for the outbox worker"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrQueued and ErrUnsettled.
func (e *QueuedError) Is(target error) bool { return target == ErrQueued || target == ErrUnsettled }

// Unwrap returns ctx's error when Do waited.
func (e *QueuedError) Unwrap() error { return e.Err }
