package memstore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/agentledger/reconciler/ledger"
)

// tx implements ledger.Tx over the store's state. Writes go straight to the
// state and push an undo step on the journal; rollback replays the journal
// backwards. The store's mutex is held for the whole transaction, so nobody
// sees a write before the commit.
type tx struct {
	s        *state
	undo     []func()
	appended bool // an outbox record was written: signal Notify on commit
	// idemUndo journals the Idempotency-Key records apart from undo, as
	// data rather than a closure each (idempotency.go): one map, so their
	// order against the other steps does not matter.
	idemUndo []idemUndo
}

var _ ledger.Tx = (*tx)(nil)

func (t *tx) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.undo = nil
	for i := len(t.idemUndo) - 1; i >= 0; i-- {
		t.idemUndo[i].apply(t.s)
	}
	t.idemUndo = nil
}

// GetRow implements ledger.Tx.
func (t *tx) GetRow(tenant, key string) (ledger.Row, error) {
	r, ok := t.s.rows[rowID{tenant, key}]
	if !ok {
		return ledger.Row{}, ledger.ErrNotFound
	}
	return r.Clone(), nil
}

// RowByLocalID implements ledger.Tx.
func (t *tx) RowByLocalID(localID string) (ledger.Row, error) {
	id, ok := t.s.byLocalID[localID]
	if !ok {
		return ledger.Row{}, ledger.ErrNotFound
	}
	return t.s.rows[id].Clone(), nil
}

// TenantsOfKey implements ledger.Tx.
func (t *tx) TenantsOfKey(key string) ([]string, error) {
	return slices.Clone(t.s.keyTenants[key]), nil
}

// errConflict reports a PutRow whose old row does not match what is stored:
// a flow bug, since the lock rules out a concurrent writer.
var errConflict = errors.New("memstore: row changed under the transaction")

// PutRow implements ledger.Tx: it replaces the row and every index entry
// derived from it.
func (t *tx) PutRow(old *ledger.Row, row ledger.Row) error {
	if !row.Status.Valid() {
		return fmt.Errorf("put row: %w: %q", ledger.ErrInvalidStatus, row.Status)
	}
	if row.MetadataLocalID == "" {
		return errors.New("put row: empty metadata_local_id")
	}
	id := rowID{row.Tenant, row.Key}
	prev, exists := t.s.rows[id]
	switch {
	case old == nil && exists:
		return fmt.Errorf("put row: insert over an existing row: %w", errConflict)
	case old != nil && !exists:
		return fmt.Errorf("put row: update of a missing row: %w", errConflict)
	case old != nil && (old.Tenant != row.Tenant || old.Key != row.Key):
		return fmt.Errorf("put row: tenant or key changed: %w", errConflict)
	}
	if owner, ok := t.s.byLocalID[row.MetadataLocalID]; ok && owner != id {
		return fmt.Errorf("put row: %w: local id in use", ledger.ErrFingerprintMismatch)
	}
	if exists {
		t.s.removeRow(prev)
	}
	t.s.insertRow(row.Clone())
	t.undo = append(t.undo, func() {
		t.s.removeRow(row)
		if exists {
			t.s.insertRow(prev)
		}
	})
	return nil
}

// AppendOutbox implements ledger.Tx.
func (t *tx) AppendOutbox(e ledger.Event) error {
	t.s.lastSeq++
	t.s.outbox = append(t.s.outbox, ledger.OutboxRecord{Seq: t.s.lastSeq, Event: e})
	t.appended = true
	t.undo = append(t.undo, func() {
		t.s.outbox = t.s.outbox[:len(t.s.outbox)-1]
		t.s.lastSeq--
	})
	return nil
}

// GetInbox implements ledger.Tx.
func (t *tx) GetInbox(vendor, eventID string) (ledger.InboxRecord, error) {
	rec, ok := t.s.inbox[inboxID{vendor, eventID}]
	if !ok {
		return ledger.InboxRecord{}, ledger.ErrNotFound
	}
	return rec, nil
}

// PutInbox implements ledger.Tx.
func (t *tx) PutInbox(vendor, eventID string, rec ledger.InboxRecord) error {
	id := inboxID{vendor, eventID}
	prev, had := t.s.inbox[id]
	t.s.putInbox(id, rec, prev, had)
	t.undo = append(t.undo, func() {
		t.s.deleteInbox(id, rec)
		if had {
			t.s.putInbox(id, prev, ledger.InboxRecord{}, false)
		}
	})
	return nil
}

// Orphans implements ledger.Tx.
func (t *tx) Orphans(localID string) ([]ledger.Delivery, error) {
	ds := t.s.orphans[localID]
	out := make([]ledger.Delivery, len(ds))
	for i, d := range ds {
		out[i] = cloneDelivery(d)
	}
	return out, nil
}

// PutOrphan implements ledger.Tx.
func (t *tx) PutOrphan(d ledger.Delivery) error {
	if d.LocalID == "" {
		return errors.New("put orphan: empty local id")
	}
	prev, had := t.s.orphans[d.LocalID]
	t.s.orphans[d.LocalID] = append(slices.Clip(prev), cloneDelivery(d))
	t.undo = append(t.undo, func() { t.s.restoreOrphans(d.LocalID, prev, had) })
	return nil
}

// DeleteOrphans implements ledger.Tx.
func (t *tx) DeleteOrphans(localID string) error {
	prev, had := t.s.orphans[localID]
	delete(t.s.orphans, localID)
	t.undo = append(t.undo, func() { t.s.restoreOrphans(localID, prev, had) })
	return nil
}

// RowByApproval implements ledger.Tx.
func (t *tx) RowByApproval(approvalID string) (ledger.Row, error) {
	id, ok := t.s.approvals[approvalID]
	if !ok {
		return ledger.Row{}, ledger.ErrApprovalNotFound
	}
	return t.s.rows[id].Clone(), nil
}

// OrphanLocalIDs implements ledger.Tx.
func (t *tx) OrphanLocalIDs(after string, limit int) ([]string, error) {
	var ids []string
	for lid, ds := range t.s.orphans {
		if lid > after && len(ds) > 0 {
			ids = append(ids, lid)
		}
	}
	slices.Sort(ids)
	return ids[:min(len(ids), limit)], nil
}

func (s *state) restoreOrphans(localID string, prev []ledger.Delivery, had bool) {
	if had {
		s.orphans[localID] = prev
	} else {
		delete(s.orphans, localID)
	}
}

// insertRow adds row and its index entries; the row must not be present.
func (s *state) insertRow(row ledger.Row) {
	id := rowID{row.Tenant, row.Key}
	s.rows[id] = row
	s.byLocalID[row.MetadataLocalID] = id
	s.keyTenants[row.Key] = insertString(s.keyTenants[row.Key], row.Tenant)
	if row.Status.Open() {
		s.due = sortedInsert(s.due, dueEntry{row.NextCheckAt, id}, compareDue)
	}
	s.seen[row.Tenant] = sortedInsert(s.seen[row.Tenant], seenEntry{row.FirstSeenAt, row.Key}, compareSeen)
	if row.Approval != nil {
		s.approvals[row.Approval.ID] = id
	}
	if row.ApprovalOpen() {
		s.open = sortedInsert(s.open, approvalEntry{row.Approval.ExpiresAt, id}, compareApproval)
	}
}

// removeRow drops row (as stored) and its index entries.
func (s *state) removeRow(row ledger.Row) {
	id := rowID{row.Tenant, row.Key}
	delete(s.rows, id)
	delete(s.byLocalID, row.MetadataLocalID)
	if ts := deleteString(s.keyTenants[row.Key], row.Tenant); len(ts) > 0 {
		s.keyTenants[row.Key] = ts
	} else {
		delete(s.keyTenants, row.Key)
	}
	if row.Status.Open() {
		s.due = sortedDelete(s.due, dueEntry{row.NextCheckAt, id}, compareDue)
	}
	if es := sortedDelete(s.seen[row.Tenant], seenEntry{row.FirstSeenAt, row.Key}, compareSeen); len(es) > 0 {
		s.seen[row.Tenant] = es
	} else {
		delete(s.seen, row.Tenant)
	}
	if row.Approval != nil {
		delete(s.approvals, row.Approval.ID)
	}
	if row.ApprovalOpen() {
		s.open = sortedDelete(s.open, approvalEntry{row.Approval.ExpiresAt, id}, compareApproval)
	}
}

func (s *state) putInbox(id inboxID, rec, prev ledger.InboxRecord, had bool) {
	if had {
		s.inboxOrder = sortedDelete(s.inboxOrder, inboxEntry{prev.FirstSeen, id}, compareInbox)
	}
	s.inbox[id] = rec
	s.inboxOrder = sortedInsert(s.inboxOrder, inboxEntry{rec.FirstSeen, id}, compareInbox)
}

func (s *state) deleteInbox(id inboxID, rec ledger.InboxRecord) {
	delete(s.inbox, id)
	s.inboxOrder = sortedDelete(s.inboxOrder, inboxEntry{rec.FirstSeen, id}, compareInbox)
}

// cloneDelivery deep-copies the pointers inside a delivery's evidence, so a
// parked orphan never aliases the caller's values.
func cloneDelivery(d ledger.Delivery) ledger.Delivery {
	if d.Evidence.Amount != nil {
		a := *d.Evidence.Amount
		d.Evidence.Amount = &a
	}
	if d.Evidence.ShouldRetry != nil {
		b := *d.Evidence.ShouldRetry
		d.Evidence.ShouldRetry = &b
	}
	return d
}
