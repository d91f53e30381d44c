package ledger

import (
	"encoding/json"
	"errors"
	"time"
)

// Outbox autonomy (docs/architecture.md §11): a new key of a tool whose
// effective autonomy is outbox is not called by the agent. Its claim
// inserts the row pending at attempt 0 and writes one work item to the
// outbox in the same transaction, which the relay publishes on the work
// stream; the runtime's worker takes it, claims the key with WorkerClaim
// (proceed, exactly once across workers), calls the vendor, reports and
// acknowledges. The agent's own claims of the key answer queued until the
// row settles.

// DecisionQueued: the call was queued for the runtime's worker; do not
// call. Wait for the key's resolution (its events, or the row).
const DecisionQueued Decision = "queued"

// EventQueued is the status of a work item: the outbox record a queued
// claim writes, published on the work stream (not on recon.<tenant>.…).
const EventQueued = "queued"

// WorkItem is what a work item tells the worker beyond the event's
// identity (key, tenant, run_id, tool, tool_call_id): enough to make the
// call without asking the ledger.
type WorkItem struct {
	Vendor          string    `json:"vendor"`
	ToolClass       ToolClass `json:"tool_class"`
	MetadataLocalID string    `json:"metadata_local_id"`
	// Intent is the claim's intent object: the one the fingerprint hashes
	// (written in RFC 8785 form; a store may respace it).
	Intent  json.RawMessage `json:"intent"`
	Request *Request        `json:"request"`
	Expect  *Expect         `json:"expect,omitempty"`
	// ReplayWindowUntil is when the vendor forgets the key (zero: it
	// does not replay).
	ReplayWindowUntil time.Time `json:"replay_window_until,omitzero"`
}

// Errors of outbox autonomy.
var (
	// ErrRequestRequired: an outbox tool's new key needs the request
	// envelope, which the worker sends.
	ErrRequestRequired = errors.New("an outbox tool's claim needs the request envelope (request): the worker makes that call")
	// ErrNotQueued: a worker's claim of a row that was not queued for a
	// worker.
	ErrNotQueued = errors.New("the row was not queued for a worker")
)

// queuedRow is the row a claim of an outbox tool inserts: pending at
// attempt 0, no lease (no call in flight until the worker claims it), out
// of the resolver's way for a lease's length.
func queuedRow(c Claim, p Policy) Row {
	row := c.Row.Clone()
	row.Attempt, row.PendingUntil, row.Autonomy = 0, time.Time{}, AutonomyOutbox
	row.NextCheckAt = c.At.UTC().Add(p.PendingTTL)
	return row
}

// workEvent is the work item of a queued row.
func workEvent(row *Row, intent json.RawMessage, at time.Time) Event {
	e := newEvent(row, EventQueued, SourceRuntime, "", at)
	req := *row.Request
	w := &WorkItem{
		Vendor: row.Vendor, ToolClass: row.ToolClass, MetadataLocalID: row.MetadataLocalID,
		Intent: append(json.RawMessage(nil), intent...), Request: &req, ReplayWindowUntil: row.ReplayWindowUntil,
	}
	if row.Expect != nil {
		x := *row.Expect
		w.Expect = &x
	}
	e.Work = w
	return e
}

// WorkerClaim is the outbox worker's claim of the row it read (the work
// item's key): the row's own identity, so the fingerprint and tool checks
// hold by construction, and Worker set. frozen is the kill switch for the
// row's tool and class.
func WorkerClaim(row Row, frozen bool, now time.Time) Claim {
	id := Row{
		Tenant: row.Tenant, Key: row.Key, IntentFingerprint: row.IntentFingerprint, MetadataLocalID: row.MetadataLocalID,
		RunID: row.RunID, Tool: row.Tool, ToolCallID: row.ToolCallID, Vendor: row.Vendor, ToolClass: row.ToolClass,
	}
	return Claim{Row: id, Frozen: frozen, Worker: true, At: now.UTC()}
}

// decideOutboxRow is DecideClaim on an existing row that was queued
// (Autonomy outbox) and is still open. An agent's claim answers queued
// again and writes nothing; the worker's first claim takes attempt 1 and
// the lease (proceed) — unless the kill switch covers the tool (wait) —
// and its later claims follow the §4 table.
func decideOutboxRow(existing *Row, c Claim, p Policy, res ClaimResult) (ClaimResult, *Row, bool) {
	if !c.Worker {
		res.Decision = DecisionQueued
		return res, nil, true
	}
	if existing.Attempt == 0 && existing.Status == StatusPending {
		if c.Frozen {
			res.Decision = DecisionWait
			return res, nil, true
		}
		row := existing.Clone()
		startAttempt(&row, c.At.UTC(), p)
		res.Decision, res.Row = DecisionProceed, row.Clone()
		return res, &row, true
	}
	return res, nil, false
}
