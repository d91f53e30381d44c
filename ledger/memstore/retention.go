package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// ExpiredRows implements ledger.Retention. The memstore keeps no settled
// index: it scans every row, which its size (tests, one process) allows.
func (s *Store) ExpiredRows(ctx context.Context, cutoff time.Time, limit int) ([]ledger.Row, error) {
	var out []ledger.Row
	err := s.view(ctx, func(st *state) error {
		held := st.retentionHolds()
		for _, r := range st.rows {
			if ledger.Expired(r, cutoff) && !held[rowID{r.Tenant, r.Key}] {
				out = append(out, r.Clone())
			}
		}
		return nil
	})
	slices.SortFunc(out, compareSettled)
	if len(out) > limit {
		out = out[:max(limit, 0)]
	}
	return out, err
}

// DeleteExpired implements ledger.Retention.
func (s *Store) DeleteExpired(ctx context.Context, cutoff time.Time, rows []ledger.Row) (int, error) {
	n := 0
	err := s.update(ctx, func(t *tx) error {
		st := t.s
		held := st.retentionHolds()
		for _, read := range rows {
			id := rowID{read.Tenant, read.Key}
			cur, ok := st.rows[id]
			if !ok || !ledger.Unchanged(read, cur) || !ledger.Expired(cur, cutoff) || held[id] {
				continue
			}
			// Not journalled: nothing after the first delete can fail.
			st.removeRow(cur)
			delete(st.orphans, cur.MetadataLocalID)
			delete(st.journal, id)
			n++
		}
		return nil
	})
	return n, err
}

// OldestSettled implements ledger.Retention.
func (s *Store) OldestSettled(ctx context.Context) (time.Time, error) {
	var oldest time.Time
	err := s.view(ctx, func(st *state) error {
		for _, r := range st.rows {
			if at, ok := r.SettledAt(); ok && (oldest.IsZero() || at.Before(oldest)) {
				oldest = at
			}
		}
		return nil
	})
	return oldest, err
}

// retentionHolds returns the rows retention must keep whatever their age:
// the originals of open compensations and the rows with an outbox record
// waiting for the relay.
func (st *state) retentionHolds() map[rowID]bool {
	held := map[rowID]bool{}
	for _, r := range st.rows {
		if r.OpenCompensation() {
			held[rowID{r.Tenant, r.CompensationOf}] = true
		}
	}
	for _, rec := range st.outbox {
		held[rowID{rec.Event.Tenant, rec.Event.Key}] = true
	}
	return held
}

// compareSettled orders rows by settled_at, then tenant and key.
func compareSettled(a, b ledger.Row) int {
	at, _ := a.SettledAt()
	bt, _ := b.SettledAt()
	return cmp.Or(at.Compare(bt), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
}
