package ledger

import (
	"time"
)

// Row is one idempotency key and what is known about its side effect.
// Field names in JSON are the API's and the stored form's.
type Row struct {
	Tenant            string    `json:"tenant"`
	Key               string    `json:"key"`
	IntentFingerprint string    `json:"intent_fingerprint"`
	MetadataLocalID   string    `json:"metadata_local_id"`
	RunID             string    `json:"run_id"`
	Tool              string    `json:"tool"`
	ToolCallID        string    `json:"tool_call_id,omitempty"`
	Vendor            string    `json:"vendor"`
	ToolClass         ToolClass `json:"tool_class"`
	Status            Status    `json:"status"`
	// Attempt counts the transport attempts granted for this key (proceed is 1,
	// each retry_same_key adds one). Retries never mint a new key.
	Attempt int `json:"attempt"`
	// VendorKey is the key sent to the vendor for this row: Key itself, or
	// a digest of it that fits the vendor's profile (max_key_len, format),
	// fixed when the row is inserted so every retry and replay sends the
	// same one even if the profile changes later. Empty on rows stored
	// before it existed: WireKey then falls back to Key.
	VendorKey         string `json:"vendor_key,omitempty"`
	UpstreamReceiptID string `json:"upstream_receipt_id,omitempty"`
	// IdempotentReplayed, VendorShouldRetry and LastHTTPStatus are what the
	// vendor said on the last reported attempt.
	IdempotentReplayed bool  `json:"idempotent_replayed,omitempty"`
	VendorShouldRetry  *bool `json:"vendor_should_retry,omitempty"`
	LastHTTPStatus     int   `json:"last_http_status,omitempty"`
	// Result is the runtime's own record of the answer that settled the row
	// (the MCP gate keeps a tool's result here, so a repeated call gets it
	// back without calling upstream): opaque JSON text, at most
	// MaxResultLen bytes, kept verbatim. It is set once, by the report whose
	// status the row settled to, and never logged (it may hold personal
	// data).
	Result string `json:"result,omitempty"`

	FirstSeenAt time.Time `json:"first_seen_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	SucceededAt time.Time `json:"succeeded_at,omitzero"`
	PagedAt     time.Time `json:"paged_at,omitzero"`
	// PendingUntil is the lease of the attempt in flight: a claim for a pending
	// row before it answers wait. Reporting an outcome ends the lease.
	PendingUntil      time.Time `json:"pending_until,omitzero"`
	ReplayWindowUntil time.Time `json:"replay_window_until,omitzero"`
	// NextCheckAt is when the resolver looks next; zero once the row is settled.
	NextCheckAt time.Time `json:"next_check_at,omitzero"`

	CompensationOf     string `json:"compensation_of,omitempty"`
	CompensationAction string `json:"compensation_action,omitempty"`

	Request    *Request    `json:"request,omitempty"`
	Expect     *Expect     `json:"expect,omitempty"`
	Resolution *Resolution `json:"resolution,omitempty"`
	// Autonomy is the gate the row was inserted under, when it was not
	// autonomous: approval (Approval is set) or outbox. Such a row starts
	// at attempt 0, no vendor call granted, until its approval is granted
	// or its work item is claimed.
	Autonomy Autonomy  `json:"autonomy,omitempty"`
	Approval *Approval `json:"approval,omitempty"`
	// Alerts records anomalies on this row: a late success, a mismatch, a
	// failure that arrived after success (recorded, never applied).
	Alerts []Alert `json:"alerts,omitempty"`
	// Traceparent is the W3C trace context of the claim that inserted the
	// row (its server span), when the service traces: every later span
	// about the row links to it, and each event of the row carries it, so
	// the run that waits for the event joins the claim's trace. The
	// ledger keeps it as text (ValidateTraceparent); the adapters parse it.
	Traceparent string `json:"traceparent,omitempty"`
}

// WireKey is the key to send to the vendor: VendorKey, or Key for a row
// stored before vendor keys existed (their vendors took the ledger key).
func (r Row) WireKey() string {
	if r.VendorKey != "" {
		return r.VendorKey
	}
	return r.Key
}

// Request is the envelope of the vendor call, kept so the resolver can
// replay the exact request with the same key.
type Request struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	ContentType string `json:"content_type,omitempty"`
	// Body is the request body as sent: form-encoded for Stripe, JSON text
	// for most others.
	Body string `json:"body,omitempty"`
}

// Expect is the amount the runtime meant to move; evidence that disagrees
// raises a mismatch alert instead of a silent success.
type Expect struct {
	// Amount in the currency's minor unit (cents).
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// Resolution records who closed a row and on what evidence.
type Resolution struct {
	Source        Source    `json:"source"`
	VendorEventID string    `json:"vendor_event_id,omitempty"`
	Actor         string    `json:"actor,omitempty"`
	Note          string    `json:"note,omitempty"`
	At            time.Time `json:"at"`
}

// Alert is one anomaly recorded on a row.
type Alert struct {
	Kind          AlertKind `json:"kind"`
	Source        Source    `json:"source"`
	VendorEventID string    `json:"vendor_event_id,omitempty"`
	Detail        string    `json:"detail,omitempty"`
	At            time.Time `json:"at"`
}

// Clone returns a deep copy, so a caller can change it without touching the
// original (stores hand out copies, never their cached values).
func (r Row) Clone() Row {
	c := r
	if r.VendorShouldRetry != nil {
		v := *r.VendorShouldRetry
		c.VendorShouldRetry = &v
	}
	if r.Request != nil {
		q := *r.Request
		c.Request = &q
	}
	if r.Expect != nil {
		e := *r.Expect
		c.Expect = &e
	}
	if r.Resolution != nil {
		res := *r.Resolution
		c.Resolution = &res
	}
	if r.Approval != nil {
		a := *r.Approval
		c.Approval = &a
	}
	if r.Alerts != nil {
		c.Alerts = append([]Alert(nil), r.Alerts...)
	}
	return c
}

// Event is the body of a resolution event: one outbox record, published on
// NATS as recon.<tenant>.<run_id>.<status>. Status is a row status, or one
// of the events EventEscalated, EventApprovalRequested, EventApproved,
// EventDenied and EventApprovalExpired — or EventQueued, a work item,
// which goes to the work stream instead.
type Event struct {
	Key string `json:"key"`
	// VendorKey is the row's WireKey: the key the vendor saw.
	VendorKey  string `json:"vendor_key,omitempty"`
	Tenant     string `json:"tenant"`
	RunID      string `json:"run_id"`
	Tool       string `json:"tool"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Status is a row status, or EventEscalated when a human was paged.
	Status        string    `json:"status"`
	ReceiptID     string    `json:"receipt_id,omitempty"`
	Source        Source    `json:"source"`
	VendorEventID string    `json:"vendor_event_id,omitempty"`
	At            time.Time `json:"at"`
	// PagedAt is set when a human was paged for this row; a settling event
	// with it tells the pager to resolve the page (same dedup key).
	PagedAt time.Time `json:"paged_at,omitzero"`
	// Approval is the row's approval record, on the approval gate's
	// events (approval_requested, approved, denied, approval_expired).
	Approval *Approval `json:"approval,omitempty"`
	// Work is the work item of a queued key (status EventQueued).
	Work *WorkItem `json:"work,omitempty"`
	// Traceparent is the row's (Row.Traceparent): the relay continues
	// that trace in the message's traceparent header.
	Traceparent string `json:"traceparent,omitempty"`
}

// EventEscalated is the event status published when a row is paged.
const EventEscalated = "escalated"

// MsgID is the JetStream Nats-Msg-Id of the event: <tenant>:<key>:<status>,
// so a relay that publishes twice is stored once. The tenant is part of it
// because a business key may exist in two tenants: with <key>:<status>
// alone (docs/architecture.md §6), the second tenant's resolution inside the
// duplicates window was dropped as a duplicate of the first's. A work item
// is <tenant>:<key> (§11): one per key, on a stream of its own.
func (e Event) MsgID() string {
	if e.Status == EventQueued {
		return e.Tenant + ":" + e.Key
	}
	return e.Tenant + ":" + e.Key + ":" + e.Status
}

// OutboxRecord is an Event waiting to be published, in commit order.
type OutboxRecord struct {
	Seq   uint64 `json:"seq"`
	Event Event  `json:"event"`
}

func newEvent(r *Row, status string, src Source, vendorEventID string, at time.Time) Event {
	return Event{
		Key: r.Key, VendorKey: r.WireKey(), Tenant: r.Tenant, RunID: r.RunID, Tool: r.Tool, ToolCallID: r.ToolCallID,
		Status: status, ReceiptID: r.UpstreamReceiptID, Source: src, VendorEventID: vendorEventID,
		At: at.UTC(), PagedAt: r.PagedAt, Traceparent: r.Traceparent,
	}
}
