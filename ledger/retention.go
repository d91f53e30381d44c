package ledger

import (
	"context"
	"errors"
	"time"
)

// ErrRetentionDeferred: a batch found the outbox too long to tell which
// rows still have an event to publish (a relay far behind); retention
// deletes nothing until the relay catches up.
var ErrRetentionDeferred = errors.New("retention deferred: the outbox is behind")

// Retention deletes settled rows once nobody can need them again
// (docs/architecture.md §15): a background job (package retention) asks for
// a small batch of expired rows, archives them if configured, and deletes
// them, so no transaction holds a store's writer for long.
//
// A row is expired at a cutoff when Expired says so and, in the store, no
// open compensation names it as its original and no outbox record of it
// waits for the relay (a queued work item is such a record).
type Retention interface {
	// ExpiredRows returns up to limit expired rows, oldest settled first,
	// read from one snapshot. It looks at a bounded number of candidates,
	// so a batch may come back short while kept rows head the queue.
	ExpiredRows(ctx context.Context, cutoff time.Time, limit int) ([]Row, error)
	// DeleteExpired deletes, in one transaction, those of rows (as
	// ExpiredRows returned them) that are unchanged and still expired at
	// cutoff, with every index entry and the deliveries parked under their
	// local ids, and returns how many it deleted. A row that changed
	// meanwhile is left alone.
	DeleteExpired(ctx context.Context, cutoff time.Time, rows []Row) (int, error)
	// OldestSettled returns when the oldest settled row still kept
	// settled; zero when no settled row is kept.
	OldestSettled(ctx context.Context) (time.Time, error)
}

// SettledAt is when r settled: the time of the evidence that closed it
// (Resolution.At). ok is false for an open row.
func (r Row) SettledAt() (at time.Time, ok bool) {
	if r.Status.Open() || r.Resolution == nil {
		return time.Time{}, false
	}
	return r.Resolution.At, true
}

// Expired reports what the row alone says about retention at cutoff: it
// is settled (succeeded or failed_poison) before cutoff and holds no open
// approval. The store adds what the row cannot say (compensations, the
// outbox).
func Expired(r Row, cutoff time.Time) bool {
	at, ok := r.SettledAt()
	return ok && at.Before(cutoff) && !r.ApprovalOpen()
}

// Unchanged reports whether stored is the row retention read as read: a
// row updated since (a late success, an alert) is looked at again later.
func Unchanged(read, stored Row) bool {
	return read.Status == stored.Status && read.UpdatedAt.Equal(stored.UpdatedAt) &&
		read.MetadataLocalID == stored.MetadataLocalID
}

// OpenCompensation reports whether r is an open compensation: its
// original must be kept until it settles (a claim of it reads the
// original again).
func (r Row) OpenCompensation() bool { return r.CompensationOf != "" && r.Status.Open() }
