package ledger

import "errors"

// Sentinel errors. Callers branch on them with errors.Is; the HTTP layer maps
// each one to a status code in one place.
var (
	// ErrNotFound means no row exists for the tenant and key.
	ErrNotFound = errors.New("not found")
	// ErrFingerprintMismatch means a caller-supplied key is already held by a
	// different intent.
	ErrFingerprintMismatch = errors.New("key already used for a different intent")
	// ErrInvalidTransition means the rules forbid the requested status change.
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrCompensationPending means the original row is still pending or unknown,
	// so compensating it could undo a side effect that has not happened.
	ErrCompensationPending = errors.New("original is still pending or unknown")
	// ErrCompensationFailed means the original row failed, so there is nothing to compensate.
	ErrCompensationFailed = errors.New("original failed; nothing to compensate")
	// ErrUnavailable means the store cannot serve the call right now (closed,
	// disk error, lost connection); the caller may retry later.
	ErrUnavailable = errors.New("store unavailable")

	// ErrInvalidRunID and the errors below reject bad input before anything is stored.
	ErrInvalidRunID      = errors.New("invalid run_id: want 1-128 of [A-Za-z0-9_-]")
	ErrInvalidTool       = errors.New("invalid tool: want 1-128 of [A-Za-z0-9_.-]")
	ErrInvalidToolCallID = errors.New("invalid tool_call_id: want at most 255 printable ASCII characters")
	ErrInvalidVendor     = errors.New("invalid vendor: want 1-64 of [a-z0-9_-]")
	ErrInvalidToolClass  = errors.New("invalid tool_class: want write_idempotent, write_ledger or write_irreversible")
	ErrInvalidKey        = errors.New("invalid key: want 1-255 printable ASCII characters")
	ErrInvalidTenant     = errors.New("invalid tenant: want 1-128 of [A-Za-z0-9_-]")
	ErrInvalidIntent     = errors.New("invalid intent: want a JSON object")
	ErrInvalidRequest    = errors.New("invalid request envelope")
	ErrInvalidExpect     = errors.New("invalid expect: want a non-negative amount and a 3-letter currency")
	ErrInvalidOutcome    = errors.New("invalid outcome")
	ErrInvalidStatus     = errors.New("invalid status")
	ErrInvalidAction     = errors.New("invalid compensation action: want 1-128 of [A-Za-z0-9_.-]")
	ErrInvalidEvidence   = errors.New("invalid evidence")
	ErrInvalidListQuery  = errors.New("invalid list query")
	ErrInvalidDelivery   = errors.New("invalid delivery")
)

// IsInvalid reports whether err is one of the ErrInvalid… input errors (not
// ErrInvalidTransition, which is a conflict with stored state).
func IsInvalid(err error) bool {
	for _, e := range invalidInput {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

var invalidInput = []error{
	ErrInvalidRunID, ErrInvalidTool, ErrInvalidToolCallID, ErrInvalidVendor, ErrInvalidToolClass,
	ErrInvalidKey, ErrInvalidTenant, ErrInvalidIntent, ErrInvalidRequest, ErrInvalidExpect,
	ErrInvalidOutcome, ErrInvalidStatus, ErrInvalidAction, ErrInvalidEvidence, ErrInvalidListQuery,
	ErrInvalidDelivery, ErrInvalidFreeze,
}
