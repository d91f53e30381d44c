package ledger

import (
	"context"
	"time"
)

// Store keeps the rows and the records that must commit with them (due
// index, outbox, inbox, orphans). Every method that changes a row writes the
// row, its indexes and its outbox record in one transaction, durably, before
// it returns. Every implementation passes ledger/storetest.
//
// Consumers declare the subsets they need (the API needs Claims, the relay
// needs Outbox); Store is the union a backend provides.
type Store interface {
	Claims
	Resolutions
	Schedule
	Outbox
	Freezes
	Tools
	Approvals
	Counts
	Retention
	// Close releases the store; calls after Close return ErrUnavailable.
	Close() error
}

// Claims is the runtime-facing part of a store.
type Claims interface {
	// Claim runs DecideClaim against the row with the claim's key under one
	// transaction. For a compensation it first checks the original again, as
	// NewCompensation did. A newly inserted row takes the orphan events parked
	// under its local id. Errors: ErrFingerprintMismatch,
	// ErrCompensationPending, ErrCompensationFailed, ErrNotFound (no original),
	// ErrUnavailable.
	Claim(ctx context.Context, c Claim) (ClaimResult, error)
	// Report records one attempt's outcome (Classify, then Apply with source
	// runtime). Errors: ErrNotFound, ErrInvalidOutcome, ErrUnavailable.
	Report(ctx context.Context, tenant, key string, o Outcome) (Row, Change, error)
	// Get returns a copy of the row. Errors: ErrNotFound, ErrUnavailable.
	Get(ctx context.Context, tenant, key string) (Row, error)
	// List returns the tenant's rows newest first (by first_seen_at, then
	// key), filtered, one page at a time. Errors: ErrInvalidListQuery (bad
	// cursor or limit), ErrUnavailable.
	List(ctx context.Context, q ListQuery) (Page, error)
}

// Resolutions is how evidence from outside the runtime reaches the rows.
type Resolutions interface {
	// Apply applies evidence to one row (resolver, human). Errors:
	// ErrNotFound, ErrInvalidTransition (human only), ErrInvalidEvidence,
	// ErrInvalidStatus, ErrUnavailable.
	Apply(ctx context.Context, tenant, key string, ev Evidence) (Row, Change, error)
	// Ingest records one vendor event: inbox (dedupe by vendor and event id),
	// join (local id, else the echoed key), transition and outbox, in one
	// transaction. Errors: ErrInvalidDelivery, ErrUnavailable.
	Ingest(ctx context.Context, d Delivery) (IngestResult, error)
	// Escalate marks an open row paged and writes its escalated event, once.
	// It reports false when the row was already paged or is settled.
	// Errors: ErrNotFound, ErrUnavailable.
	Escalate(ctx context.Context, tenant, key string, at time.Time) (Row, bool, error)
	// PruneInbox forgets vendor event ids first seen before cutoff and returns
	// how many it removed. Its cost is O(removed).
	PruneInbox(ctx context.Context, cutoff time.Time) (int, error)
	// RedriveOrphans applies the deliveries parked under every local id
	// whose row exists now (RedriveBatch local ids per transaction; POST
	// /v1/admin/redrive).
	// Its cost is O(local ids with parked deliveries). Errors: ErrUnavailable.
	RedriveOrphans(ctx context.Context) (RedriveResult, error)
}

// Schedule feeds the resolver from the due index, which holds open rows only.
type Schedule interface {
	// Due returns up to limit open rows whose next_check_at is at or before
	// now, earliest first. Its cost is O(limit), never O(rows).
	Due(ctx context.Context, now time.Time, limit int) ([]Row, error)
	// Reschedule moves an open row's next_check_at. A settled row is left
	// alone. Errors: ErrNotFound, ErrUnavailable.
	Reschedule(ctx context.Context, tenant, key string, next time.Time) error
}

// Outbox is the queue of events waiting for the relay.
type Outbox interface {
	// PendingEvents returns up to limit outbox records in commit order.
	PendingEvents(ctx context.Context, limit int) ([]OutboxRecord, error)
	// EventsAfter returns up to limit outbox records whose sequence number
	// is above after, in sequence order: the relay's read past the records
	// it already holds. Sequence order is commit order in a store with one
	// writer (bolt, memstore); a store where a lower number can commit after
	// a higher one (PostgreSQL) leases records to its relays instead.
	EventsAfter(ctx context.Context, after uint64, limit int) ([]OutboxRecord, error)
	// CountEvents returns how many records the outbox holds, less those a
	// store that leases records (PostgreSQL) marks as published and held.
	// Its cost may be O(records): callers bound how often they ask.
	CountEvents(ctx context.Context) (int, error)
	// AckEvents deletes published records; unknown sequence numbers are ignored.
	AckEvents(ctx context.Context, seqs ...uint64) error
	// Notify returns a channel that receives a value after a commit that wrote
	// outbox records (coalesced: one value may stand for many commits).
	Notify() <-chan struct{}
}

// Counts is what the reconciler_rows{status} gauge reads (docs/architecture.md §6a).
type Counts interface {
	// CountRows returns how many rows hold each status, every one of
	// Statuses() present (0 when no row holds it). It may scan the rows
	// (PostgreSQL), so a caller on a scrape path bounds it with a timeout
	// and caches the answer. Errors: ErrUnavailable.
	CountRows(ctx context.Context) (map[Status]int64, error)
}

// ListQuery selects a page of a tenant's rows.
type ListQuery struct {
	Tenant string
	Status Status // empty: any
	RunID  string // empty: any
	// Limit is 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the NextCursor of the previous page; empty starts at the newest.
	Cursor string
}

// List limits.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// Validate checks the query and fills the default limit.
func (q *ListQuery) Validate() error {
	if err := ValidateTenant(q.Tenant); err != nil {
		return err
	}
	if q.Status != "" && !q.Status.Valid() {
		return ErrInvalidListQuery.With("status %q", q.Status)
	}
	if q.RunID != "" && ValidateRunID(q.RunID) != nil {
		return ErrInvalidListQuery.With("run_id")
	}
	return validatePage(&q.Limit, q.Cursor)
}

// validatePage checks a page's limit and cursor, filling the default
// limit: every listing pages the same way.
func validatePage(limit *int, cursor string) error {
	if *limit == 0 {
		*limit = DefaultListLimit
	}
	if *limit < 1 || *limit > MaxListLimit {
		return ErrInvalidListQuery.With("limit must be 1 to %d", MaxListLimit)
	}
	if len(cursor) > 1024 {
		return ErrInvalidListQuery.With("cursor")
	}
	return nil
}

// Page is one page of rows; NextCursor is empty on the last page.
type Page struct {
	Rows       []Row
	NextCursor string
}

// Delivery is one verified vendor event, normalised for the ledger.
type Delivery struct {
	// Tenant owns the endpoint the event arrived at.
	Tenant  string
	Vendor  string
	EventID string
	// LocalID is the metadata_local_id the event carries, if any.
	LocalID string
	// IdempotencyKey is the vendor's echo of the request key, if any.
	IdempotencyKey string
	// Ignore records the event id without joining (an event type we ignore).
	Ignore bool
	// Evidence is applied to the joined row (source webhook).
	Evidence Evidence
	At       time.Time
	// Verified says how the endpoint verified the delivery (its scheme);
	// the row journal records it with a delivery that changed nothing.
	Verified string `json:",omitempty"`
	// Recheck marks a hint: a verified delivery whose body is not signed
	// (Mailgun). It carries no outcome (Evidence has no status and no
	// receipt) and makes the joined open row due now, in the same
	// transaction, so the resolver asks the vendor for its state.
	Recheck bool `json:",omitzero"`
	// ReplayToken is a value the vendor signs once per delivery (Mailgun's
	// signature token). Ingest records it in the inbox beside the event id,
	// in the same transaction, so every replica sees it: the same token
	// with the same event id is a duplicate, with another event id
	// ErrReplayedToken (nothing stored). Its record is pruned with the
	// inbox (keep inbox_retention above the endpoint's tolerance).
	ReplayToken string `json:",omitzero"`
}

// replayTokenID is the inbox id under which a delivery's replay token is
// recorded.
func (d Delivery) replayTokenID() string { return "replay-token:" + d.ReplayToken }

// Validate checks the delivery's shape.
func (d Delivery) Validate() error {
	if ValidateTenant(d.Tenant) != nil || ValidateVendor(d.Vendor) != nil {
		return ErrInvalidDelivery.With("tenant or vendor")
	}
	if !printableASCII(d.EventID, 1, MaxKeyLen) {
		return ErrInvalidDelivery.With("event id must be 1-%d printable ASCII characters", MaxKeyLen)
	}
	if !printableASCII(d.ReplayToken, 0, MaxKeyLen-len("replay-token:")) {
		return ErrInvalidDelivery.With("replay token must be at most %d printable ASCII characters", MaxKeyLen-len("replay-token:"))
	}
	if !printableASCII(d.LocalID, 0, MaxKeyLen) || !printableASCII(d.IdempotencyKey, 0, MaxKeyLen) {
		return ErrInvalidDelivery.With("local id or idempotency key")
	}
	if d.Ignore {
		return nil
	}
	if d.Evidence.Source != SourceWebhook {
		return ErrInvalidDelivery.With("evidence source must be webhook")
	}
	if d.Recheck && (d.Evidence.Status != "" || d.Evidence.ReceiptID != "") {
		return ErrInvalidDelivery.With("a recheck carries no status and no receipt")
	}
	return d.Evidence.Validate()
}

// IngestOutcome says what Ingest did with a delivery (it is the
// reconciler_webhooks_total result, where it has one).
type IngestOutcome string

// The ingest outcomes.
const (
	IngestAccepted      IngestOutcome = "accepted"       // joined and applied (perhaps as a no-op)
	IngestDuplicate     IngestOutcome = "duplicate"      // event id seen before; nothing changed
	IngestOrphan        IngestOutcome = "orphan"         // local id matches no row yet; parked
	IngestForeignTenant IngestOutcome = "foreign_tenant" // the row belongs to another tenant
	IngestUnmatched     IngestOutcome = "unmatched"      // no local id and no known key
	IngestIgnored       IngestOutcome = "ignored"        // event type ignored
)

// IngestResult is the answer to Ingest.
type IngestResult struct {
	Outcome IngestOutcome
	Row     *Row
	Change  Change
}

// InboxRecord is what the inbox remembers of a vendor event id.
type InboxRecord struct {
	FirstSeen time.Time     `json:"first_seen"`
	Result    IngestOutcome `json:"result"`
}
