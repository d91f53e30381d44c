package ledger

import "slices"

// Status is what the ledger knows about a key's side effect.
type Status string

// The four statuses of a row.
const (
	// StatusPending: claimed, the vendor call may be in flight.
	StatusPending Status = "pending"
	// StatusUnknown: the call timed out or failed without an answer; the vendor
	// may or may not have committed it. Only vendor evidence or a human closes it.
	StatusUnknown Status = "unknown"
	// StatusSucceeded: the side effect happened. Terminal.
	StatusSucceeded Status = "succeeded"
	// StatusFailedPoison: the vendor refused; a new intent needs a new key.
	StatusFailedPoison Status = "failed_poison"
)

// statuses are the four statuses, open ones first.
var statuses = [...]Status{StatusPending, StatusUnknown, StatusSucceeded, StatusFailedPoison}

// Statuses returns the four statuses, open ones first, in a new slice the
// caller may keep. Code that reports every status (reconciler_rows) ranges
// over it, so a new status is never silently left out.
func Statuses() []Status { return slices.Clone(statuses[:]) }

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool { return slices.Contains(statuses[:], s) }

// Open reports whether the row still waits for an answer (pending or unknown).
// Open rows, and only they, sit in a store's due index.
func (s Status) Open() bool { return s == StatusPending || s == StatusUnknown }

// Decision is the claim API's answer to a runtime that wants to call a vendor.
type Decision string

// The claim decisions of the design's table.
const (
	// DecisionProceed: a new row was inserted; call the vendor with the key.
	DecisionProceed Decision = "proceed"
	// DecisionReplay: the side effect already happened; use the stored receipt.
	DecisionReplay Decision = "replay"
	// DecisionWait: another attempt is in flight, or the resolver or a human
	// must close the row first.
	DecisionWait Decision = "wait"
	// DecisionRetrySameKey: call the vendor again with the same key; the
	// vendor's idempotency makes the retry safe.
	DecisionRetrySameKey Decision = "retry_same_key"
	// DecisionStop: do not call; see the ClaimResult code for why.
	DecisionStop Decision = "stop"
	// DecisionAwaitApproval: the tool needs a human's approval; a row was
	// inserted with its approval requested. Call nothing; claim again
	// (or wait for the approved event) once a human decided.
	DecisionAwaitApproval Decision = "await_approval"
)

// Stop codes carried by a DecisionStop (and CodeApprovalDenied,
// CodeApprovalExpired of the approval gate).
const (
	CodeToolFrozen   = "tool_frozen"
	CodeFailedPoison = "failed_poison"
)

// ToolClass says how far the vendor can be trusted with a retry.
type ToolClass string

// The tool classes.
const (
	// ClassWriteIdempotent: the vendor honours the idempotency key, so a retry
	// with the same key inside the vendor's replay window is safe.
	ClassWriteIdempotent ToolClass = "write_idempotent"
	// ClassWriteLedger: the vendor has no key; the ledger is the only gate.
	ClassWriteLedger ToolClass = "write_ledger"
	// ClassWriteIrreversible: never retried automatically.
	ClassWriteIrreversible ToolClass = "write_irreversible"
)

// Valid reports whether c is a known class.
func (c ToolClass) Valid() bool {
	switch c {
	case ClassWriteIdempotent, ClassWriteLedger, ClassWriteIrreversible:
		return true
	}
	return false
}

// Source says who produced the evidence behind a transition.
type Source string

// The sources of a resolution.
const (
	SourceRuntime  Source = "runtime"
	SourceWebhook  Source = "webhook"
	SourceResolver Source = "resolver"
	SourceHuman    Source = "human"
)

// Valid reports whether s is a known source.
func (s Source) Valid() bool {
	switch s {
	case SourceRuntime, SourceWebhook, SourceResolver, SourceHuman:
		return true
	}
	return false
}

// vendorEvidence reports whether the source speaks for the vendor (a vendor
// response relayed by the runtime, a signed webhook, or a resolver lookup).
func (s Source) vendorEvidence() bool { return s != SourceHuman }

// AlertKind names an anomaly that a transition raised.
type AlertKind string

// The alert kinds (reconciler_alerts_total{kind}).
const (
	// AlertLateSuccess: vendor evidence of success on a failed_poison row.
	AlertLateSuccess AlertKind = "late_success"
	// AlertMismatch: the evidence's amount or currency disagrees with expect.
	AlertMismatch AlertKind = "mismatch"
	// AlertForeignTenant: an event at one tenant's endpoint named another tenant's row.
	AlertForeignTenant AlertKind = "foreign_tenant"
	// AlertIgnoredFailure: a failure arrived after the row succeeded; recorded, not applied.
	AlertIgnoredFailure AlertKind = "ignored_after_success"
)
