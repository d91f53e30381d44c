package ledger

import (
	"errors"
	"fmt"
	"time"
)

// Tx is the handful of reads and writes one store transaction offers. The
// flows behind Flows' methods are written once against it, so every Store
// applies the same rules in the same order and differs only in how it keeps
// bytes. A Tx is used by one goroutine.
type Tx interface {
	// GetRow returns the row or ErrNotFound.
	GetRow(tenant, key string) (Row, error)
	// RowByLocalID returns the row with that metadata_local_id or ErrNotFound.
	RowByLocalID(localID string) (Row, error)
	// TenantsOfKey lists the tenants that hold a row with key (business keys
	// may repeat across tenants).
	TenantsOfKey(key string) ([]string, error)
	// PutRow writes row and keeps every index in step with it; old is the
	// row as read in this transaction, nil for an insert.
	PutRow(old *Row, row Row) error
	// AppendOutbox adds an event at the next outbox sequence.
	AppendOutbox(e Event) error
	// GetInbox returns the inbox record or ErrNotFound.
	GetInbox(vendor, eventID string) (InboxRecord, error)
	// PutInbox records a vendor event id.
	PutInbox(vendor, eventID string, rec InboxRecord) error
	// Orphans returns the deliveries parked under a local id, oldest first.
	Orphans(localID string) ([]Delivery, error)
	// PutOrphan parks a delivery under its local id.
	PutOrphan(d Delivery) error
	// DeleteOrphans removes every delivery parked under a local id.
	DeleteOrphans(localID string) error
	// OrphanLocalIDs lists, in byte order, up to limit distinct local ids
	// with deliveries parked under them, starting after the local id after
	// ("": from the first).
	OrphanLocalIDs(after string, limit int) ([]string, error)
	// RowByApproval returns the row holding the approval with this id, as
	// GetRow would (locked for the transaction), or ErrApprovalNotFound.
	// PutRow keeps the approval id index in step, like the local id's.
	RowByApproval(id string) (Row, error)
}

// claimTx runs a claim inside tx.
func claimTx(tx Tx, c Claim, p Policy) (ClaimResult, error) {
	// NewClaim validated these; a Claim built by hand is checked again
	// before its key reaches a store's index.
	if err := ValidateTenant(c.Row.Tenant); err != nil {
		return ClaimResult{}, err
	}
	if err := ValidateKey(c.Row.Key); err != nil {
		return ClaimResult{}, err
	}
	if err := c.Gate.Validate(); err != nil {
		return ClaimResult{}, err
	}
	if c.Row.CompensationOf != "" {
		orig, err := tx.GetRow(c.Row.Tenant, c.Row.CompensationOf)
		if err != nil {
			return ClaimResult{}, fmt.Errorf("compensation of %s: %w", c.Row.CompensationOf, err)
		}
		if err := checkCompensable(orig); err != nil {
			return ClaimResult{}, err
		}
	}
	var existing *Row
	switch r, err := tx.GetRow(c.Row.Tenant, c.Row.Key); {
	case err == nil:
		existing = &r
	case !errors.Is(err, ErrNotFound):
		return ClaimResult{}, err
	}
	res, write, err := DecideClaim(existing, c, p)
	if err != nil || write == nil {
		return res, err
	}
	if existing == nil {
		// The local id index is global: a business key whose local id is
		// taken (another tenant, same key) cannot be claimed twice.
		if _, err := tx.RowByLocalID(write.MetadataLocalID); err == nil {
			return ClaimResult{}, fmt.Errorf("%w: local id in use", ErrFingerprintMismatch)
		} else if !errors.Is(err, ErrNotFound) {
			return ClaimResult{}, err
		}
	}
	if err := tx.PutRow(existing, *write); err != nil {
		return ClaimResult{}, err
	}
	for _, e := range res.Events {
		if err := tx.AppendOutbox(e); err != nil {
			return ClaimResult{}, err
		}
	}
	if !res.Inserted {
		return res, nil
	}
	row := *write
	changes, err := applyOrphans(tx, &row, p)
	if err != nil || len(changes) == 0 {
		return res, err
	}
	res.Changes = append(res.Changes, changes...)
	res.Row = row.Clone()
	res.afterOrphans()
	return res, nil
}

// applyOrphans applies the deliveries parked under row's local id to row
// (as read or written in this tx; updated in place), records each in the
// inbox as accepted and removes them all. It returns one change per
// delivery, none when nothing was parked.
func applyOrphans(tx Tx, row *Row, p Policy) ([]Change, error) {
	orphans, err := tx.Orphans(row.MetadataLocalID)
	if err != nil || len(orphans) == 0 {
		return nil, err
	}
	changes := make([]Change, 0, len(orphans))
	for _, d := range orphans {
		if d.Tenant != row.Tenant {
			// An event at another tenant's endpoint never touches this row;
			// it is dropped with the others and counted as a security alert.
			changes = append(changes, Change{From: row.Status, To: row.Status, Alerts: []AlertKind{AlertForeignTenant}})
			continue
		}
		before := row.Clone()
		ch, err := applyWrite(tx, &before, row, d.Evidence, p)
		if err != nil {
			return nil, err
		}
		changes = append(changes, ch)
		if err := tx.PutInbox(d.Vendor, d.EventID, InboxRecord{FirstSeen: d.At.UTC(), Result: IngestAccepted}); err != nil {
			return nil, err
		}
	}
	if err := tx.DeleteOrphans(row.MetadataLocalID); err != nil {
		return nil, err
	}
	return changes, nil
}

// RedriveResult is what a redrive of parked deliveries did.
type RedriveResult struct {
	// LocalIDs is how many local ids with parked deliveries were looked at.
	LocalIDs int
	// Rows are the rows that took their parked deliveries, each with one
	// change per delivery (as ClaimResult.Changes).
	Rows []RedrivenRow
	// StillParked counts the local ids that still have no row.
	StillParked int
}

// RedrivenRow is a row after its parked deliveries were applied.
type RedrivenRow struct {
	Row     Row
	Changes []Change
}

// redriveTx looks at up to limit local ids with parked deliveries, after
// the cursor after ("": the first), and applies each one's deliveries to its
// row if the row exists now. A row inserted by Claim takes its orphans in
// the same transaction, so under the flows this finds nothing to apply; it
// repairs what they never leave behind (a row restored from a backup, a
// store written by hand or by an older build). It returns the cursor of the
// next batch, "" after the last.
func redriveTx(tx Tx, after string, limit int, p Policy) (RedriveResult, string, error) {
	if limit <= 0 {
		return RedriveResult{}, "", ErrInvalidRequest.With("redrive limit %d", limit)
	}
	ids, err := tx.OrphanLocalIDs(after, limit)
	if err != nil {
		return RedriveResult{}, "", err
	}
	res := RedriveResult{LocalIDs: len(ids)}
	for _, id := range ids {
		row, err := tx.RowByLocalID(id)
		if errors.Is(err, ErrNotFound) {
			res.StillParked++
			continue
		}
		if err != nil {
			return RedriveResult{}, "", err
		}
		changes, err := applyOrphans(tx, &row, p)
		if err != nil {
			return RedriveResult{}, "", err
		}
		res.Rows = append(res.Rows, RedrivenRow{Row: row.Clone(), Changes: changes})
	}
	next := ""
	if len(ids) == limit {
		next = ids[len(ids)-1]
	}
	return res, next, nil
}

// applyWrite applies evidence to row (read in this tx as old) and writes the row
// and its outbox record.
func applyWrite(tx Tx, old, row *Row, ev Evidence, p Policy) (Change, error) {
	ch, err := Apply(row, ev, p)
	if err != nil {
		return ch, err
	}
	if err := tx.PutRow(old, *row); err != nil {
		return ch, err
	}
	if ch.Event != nil {
		if err := tx.AppendOutbox(*ch.Event); err != nil {
			return ch, err
		}
	}
	return ch, nil
}

// reportTx records a runtime's outcome inside tx.
func reportTx(tx Tx, tenant, key string, o Outcome, p Policy) (Row, Change, error) {
	if err := o.Validate(); err != nil {
		return Row{}, Change{}, err
	}
	return applyTx(tx, tenant, key, Classify(o), p)
}

// applyTx applies evidence to one row inside tx.
func applyTx(tx Tx, tenant, key string, ev Evidence, p Policy) (Row, Change, error) {
	if err := ev.Validate(); err != nil {
		return Row{}, Change{}, err
	}
	old, err := tx.GetRow(tenant, key)
	if err != nil {
		return Row{}, Change{}, err
	}
	row := old.Clone()
	ch, err := applyWrite(tx, &old, &row, ev, p)
	if err != nil {
		return Row{}, Change{}, err
	}
	return row, ch, nil
}

// decideApprovalTx applies an approval decision inside tx: the row, and
// its outbox record when the decision writes one.
func decideApprovalTx(tx Tx, d ApprovalDecision) (Row, Change, error) {
	if err := d.Validate(); err != nil {
		return Row{}, Change{}, err
	}
	old, err := tx.RowByApproval(d.ID)
	if err != nil {
		return Row{}, Change{}, err
	}
	row := old.Clone()
	ch, err := DecideApproval(&row, d)
	if err != nil {
		return Row{}, Change{}, err
	}
	if row.Approval.State == old.Approval.State {
		return old, ch, nil // an expiry that found nothing to expire
	}
	if err := tx.PutRow(&old, row); err != nil {
		return Row{}, Change{}, err
	}
	if ch.Event != nil {
		if err := tx.AppendOutbox(*ch.Event); err != nil {
			return Row{}, Change{}, err
		}
	}
	return row, ch, nil
}

// escalateTx marks an open row paged inside tx, once.
func escalateTx(tx Tx, tenant, key string, at time.Time) (Row, bool, error) {
	old, err := tx.GetRow(tenant, key)
	if err != nil {
		return Row{}, false, err
	}
	row := old.Clone()
	e, ok := escalate(&row, at)
	if !ok {
		return old, false, nil
	}
	if err := tx.PutRow(&old, row); err != nil {
		return Row{}, false, err
	}
	if err := tx.AppendOutbox(e); err != nil {
		return Row{}, false, err
	}
	return row, true, nil
}

// rescheduleTx moves an open row's next check inside tx, and writes the
// journal entries the caller brought.
func rescheduleTx(tx Tx, tenant, key string, next time.Time, notes []JournalEntry) error {
	old, err := tx.GetRow(tenant, key)
	if err != nil {
		return err
	}
	if err := writeJournal(tx, tenant, key, notes); err != nil {
		return err
	}
	row := old.Clone()
	if !Reschedule(&row, next) {
		return nil
	}
	return tx.PutRow(&old, row)
}

// ingestTx records a vendor event inside tx: inbox, join, transition, outbox.
func ingestTx(tx Tx, d Delivery, p Policy) (IngestResult, error) {
	if err := d.Validate(); err != nil {
		return IngestResult{}, err
	}
	switch _, err := tx.GetInbox(d.Vendor, d.EventID); {
	case err == nil:
		return IngestResult{Outcome: IngestDuplicate}, journalDuplicate(tx, d)
	case !errors.Is(err, ErrNotFound):
		return IngestResult{}, err
	}
	if d.ReplayToken != "" {
		// The event id is new: a token already recorded came with another
		// event.
		switch _, err := tx.GetInbox(d.Vendor, d.replayTokenID()); {
		case err == nil:
			return IngestResult{}, ErrReplayedToken
		case !errors.Is(err, ErrNotFound):
			return IngestResult{}, err
		}
	}
	res, err := ingest(tx, d, p)
	if err != nil {
		return IngestResult{}, err
	}
	rec := InboxRecord{FirstSeen: d.At.UTC(), Result: res.Outcome}
	if err := tx.PutInbox(d.Vendor, d.EventID, rec); err != nil {
		return IngestResult{}, err
	}
	if d.ReplayToken != "" {
		if err := tx.PutInbox(d.Vendor, d.replayTokenID(), rec); err != nil {
			return IngestResult{}, err
		}
	}
	return res, nil
}

func ingest(tx Tx, d Delivery, p Policy) (IngestResult, error) {
	if d.Ignore {
		return IngestResult{Outcome: IngestIgnored}, nil
	}
	row, err := joinRow(tx, d)
	switch {
	case errors.Is(err, ErrNotFound):
		if d.LocalID == "" {
			return IngestResult{Outcome: IngestUnmatched}, nil
		}
		if err := tx.PutOrphan(d); err != nil {
			return IngestResult{}, err
		}
		return IngestResult{Outcome: IngestOrphan}, nil
	case err != nil:
		return IngestResult{}, err
	}
	if row.Tenant != d.Tenant {
		return IngestResult{Outcome: IngestForeignTenant, Change: Change{Alerts: []AlertKind{AlertForeignTenant}}}, nil
	}
	updated := row.Clone()
	if d.Recheck {
		// A hint: the resolver asks the vendor now (Reschedule leaves a
		// settled row alone).
		Reschedule(&updated, d.At)
	}
	ch, err := applyWrite(tx, &row, &updated, d.Evidence, p)
	if err != nil {
		return IngestResult{}, err
	}
	if ch.Event == nil {
		// Nothing the stream will carry: the journal keeps the delivery.
		e := deliveryEntry(updated, d, NoteNoChange, ch)
		if err := writeJournal(tx, updated.Tenant, updated.Key, []JournalEntry{e}); err != nil {
			return IngestResult{}, err
		}
	}
	return IngestResult{Outcome: IngestAccepted, Row: &updated, Change: ch}, nil
}

// joinRow finds the row an event speaks of: by local id, else by the echoed
// idempotency key (preferring the endpoint's own tenant).
func joinRow(tx Tx, d Delivery) (Row, error) {
	if d.LocalID != "" {
		r, err := tx.RowByLocalID(d.LocalID)
		if !errors.Is(err, ErrNotFound) {
			return r, err
		}
	}
	if d.IdempotencyKey == "" {
		return Row{}, ErrNotFound
	}
	tenants, err := tx.TenantsOfKey(d.IdempotencyKey)
	if err != nil {
		return Row{}, err
	}
	if len(tenants) == 0 {
		return Row{}, ErrNotFound
	}
	pick := tenants[0]
	for _, t := range tenants {
		if t == d.Tenant {
			pick = t
		}
	}
	return tx.GetRow(pick, d.IdempotencyKey)
}
