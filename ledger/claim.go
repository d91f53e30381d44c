package ledger

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ClaimRequest is what a runtime asks for before a vendor call. Tenant comes
// from the caller's credentials; ReplayWindow and Frozen from configuration.
type ClaimRequest struct {
	Tenant     string
	RunID      string
	Tool       string
	ToolCallID string
	Vendor     string
	ToolClass  ToolClass
	// Intent holds only the fields that define the side effect; it must be a JSON object.
	Intent json.RawMessage
	// Key is an optional caller-supplied business key; empty mints one.
	Key     string
	Request *Request
	Expect  *Expect
	// ReplayWindow is how long the vendor remembers the key (0: no replay).
	ReplayWindow time.Duration
	// Frozen is true when the kill switch covers this tool or its class.
	Frozen bool
	// Gate is what the registry decided for this claim (zero: autonomous).
	Gate Gate
	// Traceparent is the W3C trace context of the claim's span (empty when
	// the service does not trace); a row the claim inserts keeps it.
	Traceparent string
}

// Claim is a validated claim, ready for Store.Claim: the row that a proceed
// inserts, and the flags the decision needs.
type Claim struct {
	Row    Row
	Frozen bool
	Gate   Gate
	// Worker is set on the outbox worker's claim of a queued key
	// (WorkerClaim): it never inserts a row, and it takes the first lease
	// of a queued row, which no agent's claim gets.
	Worker bool
	// Intent is the intent's canonical JSON (RFC 8785), which a queued
	// work item carries to the worker.
	Intent json.RawMessage
	At     time.Time
}

// NewClaim validates a request and builds the row a proceed would insert.
// Every input error matches ErrInvalid (and one of the ErrInvalid… errors).
func NewClaim(req ClaimRequest, p Policy, now time.Time) (Claim, error) {
	p = p.withDefaults()
	now = now.UTC()
	if err := ValidateTenant(req.Tenant); err != nil {
		return Claim{}, err
	}
	// Every field is checked, and every problem reported at once.
	var bad []*InvalidError
	var other error // a check's error that is no InvalidError (none today)
	check := func(err error, empty bool) {
		var ie *InvalidError
		switch {
		case err == nil:
		case !errors.As(err, &ie):
			other = cmp.Or(other, err)
		case empty:
			bad = append(bad, ie.Missing())
		default:
			bad = append(bad, ie)
		}
	}
	check(ValidateRunID(req.RunID), req.RunID == "")
	check(validateTool(req.Tool), req.Tool == "")
	check(validateToolCallID(req.ToolCallID), false)
	check(ValidateVendor(req.Vendor), req.Vendor == "")
	if !req.ToolClass.Valid() {
		check(ErrInvalidToolClass, req.ToolClass == "")
	}
	if req.Key != "" {
		check(ValidateKey(req.Key), false)
	}
	check(validateRequest(req.Request), false)
	check(validateExpect(req.Expect), false)
	check(ValidateTraceparent(req.Traceparent), false)
	if _, _, err := fingerprint(req.Intent); err != nil {
		check(err, len(bytes.TrimSpace(req.Intent)) == 0 || string(bytes.TrimSpace(req.Intent)) == "null")
	}
	if other != nil {
		return Claim{}, other
	}
	if err := joinInvalid(bad); err != nil {
		return Claim{}, err
	}
	if req.ReplayWindow < 0 {
		return Claim{}, ErrInvalidRequest.With("negative replay window")
	}
	if err := req.Gate.Validate(); err != nil {
		return Claim{}, err
	}
	fp, canon, err := fingerprint(req.Intent)
	if err != nil {
		return Claim{}, err
	}
	key, minted := req.Key, req.Key == ""
	if minted {
		key = MintKey(req.Tenant, req.RunID, req.Tool, fp)
	}
	row := Row{
		Tenant: req.Tenant, Key: key, IntentFingerprint: fp, MetadataLocalID: LocalID(req.Tenant, key, minted),
		RunID: req.RunID, Tool: req.Tool, ToolCallID: req.ToolCallID, Vendor: req.Vendor,
		ToolClass: req.ToolClass, Status: StatusPending, Attempt: 1,
		FirstSeenAt: now, UpdatedAt: now,
		PendingUntil: now.Add(p.PendingTTL), NextCheckAt: now.Add(p.Grace),
		Traceparent: req.Traceparent,
	}
	if req.ReplayWindow > 0 {
		row.ReplayWindowUntil = now.Add(req.ReplayWindow)
	}
	if req.Request != nil {
		r := *req.Request
		row.Request = &r
	}
	if req.Expect != nil {
		e := Expect{Amount: req.Expect.Amount, Currency: strings.ToLower(req.Expect.Currency)}
		row.Expect = &e
	}
	return Claim{Row: row, Frozen: req.Frozen, Gate: req.Gate, Intent: canon, At: now}, nil
}

// NewCompensation builds the claim for compensating orig with action
// (refund a charge, void an invoice). Its key is CompensationKey(orig.Key,
// action), so a second request finds the first row. The store checks orig's
// status again inside its transaction.
func NewCompensation(orig Row, action string, replayWindow time.Duration, frozen bool, p Policy, now time.Time) (Claim, error) {
	if err := ValidateAction(action); err != nil {
		return Claim{}, err
	}
	if err := checkCompensable(orig); err != nil {
		return Claim{}, err
	}
	intent, _ := json.Marshal(map[string]string{"compensate": orig.Key, "action": action})
	c, err := NewClaim(ClaimRequest{
		Tenant: orig.Tenant, RunID: orig.RunID, Tool: orig.Tool, ToolCallID: orig.ToolCallID,
		Vendor: orig.Vendor, ToolClass: orig.ToolClass, Intent: intent,
		Key: CompensationKey(orig.Key, action), ReplayWindow: replayWindow, Frozen: frozen,
	}, p, now)
	if err != nil {
		return Claim{}, err
	}
	c.Row.CompensationOf = orig.Key
	c.Row.CompensationAction = action
	return c, nil
}

// checkCompensable says whether orig may be compensated: not while its side
// effect is undecided (ErrCompensationPending), not when it failed
// (ErrCompensationFailed).
func checkCompensable(orig Row) error {
	switch orig.Status {
	case StatusPending, StatusUnknown:
		return ErrCompensationPending
	case StatusFailedPoison:
		return ErrCompensationFailed
	}
	return nil
}

// ClaimResult is the answer to a claim.
type ClaimResult struct {
	Decision Decision
	// Code says why a DecisionStop stops (CodeToolFrozen, CodeFailedPoison).
	Code string
	// Row is the row after the claim; zero for a frozen tool with no row.
	Row Row
	// Inserted is true when this claim created the row.
	Inserted bool
	// Changes are the transitions applied from parked orphan events.
	Changes []Change
	// Events are outbox records the claim itself writes with the row: the
	// approval gate's (approval_requested, approval_expired).
	Events []Event
}

// DecideClaim applies the design's claim table to the existing row (nil when
// the key is new). It returns the result and the row to write, or nil when
// nothing changes; the result's Events go to the outbox with the row.
// Stores call it inside their transaction.
//
// The approval gate (docs/architecture.md §11) adds: a new key whose gate is
// approval is inserted pending at attempt 0 with its approval requested
// (await_approval); while it is requested, a claim waits — and once it has
// expired, the claim expires it (stop, approval_expired); once it is
// granted, the first claim proceeds (attempt 1, the lease) and the rest
// wait. Outbox autonomy adds: a new key whose gate is outbox is inserted
// pending at attempt 0 with one work item in the outbox (queued; it needs
// the request envelope); the agent's claims of it answer queued until it
// settles, and only a worker's claim (WorkerClaim) proceeds, once. A row at
// attempt 0 is never retried: no call was ever granted.
func DecideClaim(existing *Row, c Claim, p Policy) (ClaimResult, *Row, error) {
	p = p.withDefaults()
	now := c.At.UTC()
	if existing == nil {
		if c.Worker {
			return ClaimResult{}, nil, ErrNotFound // a worker never inserts: it claims a queued row
		}
		if c.Frozen {
			return ClaimResult{Decision: DecisionStop, Code: CodeToolFrozen}, nil, nil
		}
		switch c.Gate.Autonomy {
		case AutonomyApproval:
			row := awaitingRow(c)
			e := approvalEvent(&row, EventApprovalRequested, SourceRuntime, now)
			return ClaimResult{Decision: DecisionAwaitApproval, Row: row.Clone(), Inserted: true, Events: []Event{e}}, &row, nil
		case AutonomyOutbox:
			if c.Row.Request == nil {
				return ClaimResult{}, nil, ErrRequestRequired
			}
			row := queuedRow(c, p)
			e := workEvent(&row, c.Intent, now)
			return ClaimResult{Decision: DecisionQueued, Row: row.Clone(), Inserted: true, Events: []Event{e}}, &row, nil
		}
		// Two copies, as for a retry: a store may change the row it writes
		// without changing the result it returns.
		row := c.Row.Clone()
		return ClaimResult{Decision: DecisionProceed, Row: row.Clone(), Inserted: true}, &row, nil
	}
	if existing.IntentFingerprint != c.Row.IntentFingerprint {
		return ClaimResult{}, nil, ErrFingerprintMismatch
	}
	// The tool, its class and the vendor are part of the intent too. A
	// minted key hashes the tool in, but not the class or the vendor, and a
	// business key hashes nothing: a claim naming other ones must not get
	// its answer from this row. The kill switch, for one, is asked about
	// the claim's tool and class, while RetryAllowed reads the row's.
	if existing.Tool != c.Row.Tool || existing.ToolClass != c.Row.ToolClass || existing.Vendor != c.Row.Vendor {
		return ClaimResult{}, nil, fmt.Errorf("%w: the key holds a claim of another tool, tool class or vendor", ErrFingerprintMismatch)
	}
	res := ClaimResult{Row: existing.Clone()}
	switch existing.Status {
	case StatusSucceeded:
		res.Decision = DecisionReplay
		return res, nil, nil
	case StatusFailedPoison:
		res.Decision, res.Code = DecisionStop, stopCode(existing)
		return res, nil, nil
	}
	if c.Worker && existing.Autonomy != AutonomyOutbox {
		return ClaimResult{}, nil, ErrNotQueued
	}
	if existing.Autonomy == AutonomyOutbox {
		if r, write, done := decideOutboxRow(existing, c, p, res); done {
			return r, write, nil
		}
	}
	if a := existing.Approval; a != nil && existing.Attempt == 0 && existing.Status == StatusPending {
		switch a.State {
		case ApprovalRequested:
			if now.Before(a.ExpiresAt) {
				res.Decision = DecisionWait
				return res, nil, nil
			}
			row := existing.Clone()
			var ch Change
			expire(&row, &ch, now)
			return ClaimResult{Decision: DecisionStop, Code: CodeApprovalExpired, Row: row.Clone(), Events: []Event{*ch.Event}}, &row, nil
		case ApprovalGranted:
			if c.Frozen {
				res.Decision = DecisionWait
				return res, nil, nil
			}
			row := existing.Clone()
			startAttempt(&row, now, p)
			res.Decision, res.Row = DecisionProceed, row.Clone()
			return res, &row, nil
		}
	}
	// Pending or unknown. An attempt in flight holds a lease: the design's
	// table says "pending, younger than pending_until"; the lease also covers
	// an unknown row that was just granted retry_same_key, else 64 concurrent
	// claims of an unknown row would all call the vendor at once.
	if now.Before(existing.PendingUntil) {
		res.Decision = DecisionWait
		return res, nil, nil
	}
	if !c.Frozen && existing.Attempt > 0 && RetryAllowed(*existing, now) {
		row := existing.Clone()
		startAttempt(&row, now, p)
		res.Decision, res.Row = DecisionRetrySameKey, row.Clone()
		return res, &row, nil
	}
	res.Decision = DecisionWait
	return res, nil, nil
}

// startAttempt grants row one more attempt at now and takes its lease.
func startAttempt(row *Row, now time.Time, p Policy) {
	row.Attempt++
	row.UpdatedAt = now
	row.PendingUntil = now.Add(p.PendingTTL)
	row.NextCheckAt = now.Add(p.Grace)
}

// RetryAllowed reports whether an open row may be retried with the same key
// at now: only a write_idempotent tool, inside the vendor's replay window,
// and not when the last answer was a 5xx (Stripe replays a stored 500, so a
// retry would only read the failure back).
func RetryAllowed(r Row, now time.Time) bool {
	// A row at attempt 0 was never granted a call (§11): there is nothing
	// to retry, and a replay would be the call a human or a worker must make.
	return r.Status.Open() && r.Attempt > 0 && r.ToolClass == ClassWriteIdempotent &&
		now.Before(r.ReplayWindowUntil) && r.LastHTTPStatus < 500
}

// afterOrphans recomputes a proceed, an await_approval or a queued after
// parked orphan events were applied to the freshly inserted row: a row they
// settled must not be called again (nor wait for a human, who cannot
// decide a row that left pending, nor for a worker).
func (r *ClaimResult) afterOrphans() {
	if r.Decision != DecisionProceed && r.Decision != DecisionAwaitApproval && r.Decision != DecisionQueued {
		return
	}
	switch r.Row.Status {
	case StatusSucceeded:
		r.Decision = DecisionReplay
	case StatusFailedPoison:
		r.Decision, r.Code = DecisionStop, CodeFailedPoison
	case StatusUnknown:
		r.Decision = DecisionWait
	}
}
