package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// Retention (ledger.Retention, docs/architecture.md §15) reads two indexes
// PutRow keeps:
//
//	settled        be64(settled_at) ‖ tenant \x00 key   → (settled rows only)
//	compensations  tenant \x00 original \x00 key       → (open compensations only)
//
// ExpiredRows walks settled from its old end in a read transaction;
// DeleteExpired is one op of the committer that looks at each row again
// and deletes the row and its entries in every index. Both are bounded by
// the batch, never by the file.
//
// Hook points for a write path that replaces the committer: PutRow calls
// putRetentionIndexes; DeleteExpired needs only write() and the boltTx
// helpers below; indexRetentionOnce runs in Open's schema transaction.

// Bounds of one retention batch.
const (
	// maxRetentionScan bounds how many settled entries one ExpiredRows
	// looks at per row asked for: rows kept (an open compensation, an
	// unpublished event) are skipped, not waited for.
	maxRetentionScan = 4
	// maxOutboxHolds bounds the outbox records a batch reads to learn
	// which rows still have an event to publish. A larger outbox means a
	// relay that is behind; retention then waits for it.
	maxOutboxHolds = 1024
)

// metaRetentionIndexed marks a file whose retention indexes are built.
var metaRetentionIndexed = []byte("retention_indexed")

func settledKey(at time.Time, rk []byte) []byte {
	b := make([]byte, 0, 8+len(rk))
	b = appendUint64(b, timeKey(at))
	return append(b, rk...)
}

// compensationKey is tenant \x00 original \x00 key.
func compensationKey(r *ledger.Row) []byte { return join(r.Tenant, r.CompensationOf, r.Key) }

// compensationPrefix is tenant \x00 original \x00: the open compensations of a row.
func compensationPrefix(tenant, key string) []byte { return append(join(tenant, key), sep) }

// putRetentionIndexes moves row's entries in settled and compensations
// (old as read in this transaction, nil for an insert).
func (t *boltTx) putRetentionIndexes(old, row *ledger.Row) error {
	var oldS, newS, oldC, newC []byte
	if old != nil {
		if at, ok := old.SettledAt(); ok {
			oldS = settledKey(at, rowKey(old.Tenant, old.Key))
		}
		if old.OpenCompensation() {
			oldC = compensationKey(old)
		}
	}
	if at, ok := row.SettledAt(); ok {
		newS = settledKey(at, rowKey(row.Tenant, row.Key))
	}
	if row.OpenCompensation() {
		newC = compensationKey(row)
	}
	for _, m := range []struct {
		name     []byte
		old, new []byte
	}{{bucketSettled, oldS, newS}, {bucketCompensations, oldC, newC}} {
		if bytes.Equal(m.old, m.new) {
			continue
		}
		b := t.bucket(m.name)
		if m.old != nil {
			if err := b.Delete(m.old); err != nil {
				return err
			}
		}
		if m.new != nil {
			if err := b.Put(m.new, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexRetentionOnce builds the retention indexes of a file written before
// they existed: one scan of the rows, once.
func indexRetentionOnce(tx *bolt.Tx) error {
	m := tx.Bucket(bucketMeta)
	if m.Get(metaRetentionIndexed) != nil {
		return nil
	}
	settled, comps := tx.Bucket(bucketSettled), tx.Bucket(bucketCompensations)
	err := tx.Bucket(bucketRows).ForEach(func(_, v []byte) error {
		r, err := decodeRow(v)
		if err != nil {
			return err
		}
		if at, ok := r.SettledAt(); ok {
			if err := settled.Put(settledKey(at, rowKey(r.Tenant, r.Key)), nil); err != nil {
				return err
			}
		}
		if r.OpenCompensation() {
			return comps.Put(compensationKey(&r), nil)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index rows for retention: %w", err)
	}
	return m.Put(metaRetentionIndexed, []byte("1"))
}

// outboxHolds returns the rows (tenant \x00 key) with an outbox record, or
// ok false when the outbox holds more than maxOutboxHolds records.
func (t *boltTx) outboxHolds() (map[string]bool, bool, error) {
	held := map[string]bool{}
	c := t.bucket(bucketOutbox).Cursor()
	n := 0
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if n++; n > maxOutboxHolds {
			return nil, false, nil
		}
		var e struct {
			Tenant string `json:"tenant"`
			Key    string `json:"key"`
		}
		if err := unmarshal(v, &e); err != nil {
			return nil, false, fmt.Errorf("outbox %x: %w", k, err)
		}
		held[string(rowKey(e.Tenant, e.Key))] = true
	}
	return held, true, nil
}

// hasOpenCompensation reports whether an open compensation names the row.
func (t *boltTx) hasOpenCompensation(tenant, key string) bool {
	p := compensationPrefix(tenant, key)
	k, _ := t.bucket(bucketCompensations).Cursor().Seek(p)
	return k != nil && bytes.HasPrefix(k, p)
}

// ExpiredRows implements ledger.Retention.
func (s *Store) ExpiredRows(ctx context.Context, cutoff time.Time, limit int) ([]ledger.Row, error) {
	var out []ledger.Row
	err := s.view(ctx, func(tx *boltTx) error {
		held, ok, err := tx.outboxHolds()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: more than %d records", ledger.ErrRetentionDeferred, maxOutboxHolds)
		}
		end := timeKey(cutoff)
		c := tx.bucket(bucketSettled).Cursor()
		scanned := 0
		for k, _ := c.First(); k != nil && len(out) < limit && scanned < limit*maxRetentionScan; k, _ = c.Next() {
			scanned++
			if len(k) < 8 || binary.BigEndian.Uint64(k) >= end {
				break
			}
			rk := k[8:]
			v, err := tx.rowValueRK(rk)
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("settled %q: dangling index entry", rk)
			}
			r, err := decodeRow(v)
			if err != nil {
				return err
			}
			if !ledger.Expired(r, cutoff) || held[string(rk)] || tx.hasOpenCompensation(r.Tenant, r.Key) {
				continue
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expired rows: %w", err)
	}
	return out, nil
}

// DeleteExpired implements ledger.Retention: one op of the committer.
func (s *Store) DeleteExpired(ctx context.Context, cutoff time.Time, rows []ledger.Row) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	var n int
	err := s.write(ctx, func(tx *boltTx) error {
		n = 0
		held, ok, err := tx.outboxHolds()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: more than %d records", ledger.ErrRetentionDeferred, maxOutboxHolds)
		}
		for _, read := range rows {
			cur, err := tx.GetRow(read.Tenant, read.Key)
			if err != nil {
				continue // gone already (another batch, a restore)
			}
			if !ledger.Unchanged(read, cur) || !ledger.Expired(cur, cutoff) ||
				held[string(rowKey(cur.Tenant, cur.Key))] || tx.hasOpenCompensation(cur.Tenant, cur.Key) {
				continue
			}
			if err := tx.deleteRow(&cur); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete expired rows: %w", err)
	}
	return n, nil
}

// deleteRow removes a settled row and its entry in every index PutRow
// keeps, and the deliveries parked under its local id.
func (t *boltTx) deleteRow(r *ledger.Row) error {
	rk := rowKey(r.Tenant, r.Key)
	t.writes++
	del := func(bucket, k []byte) error {
		if err := t.bucket(bucket).Delete(k); err != nil {
			return fmt.Errorf("delete row %s: %s: %w", r.Key, bucket, err)
		}
		return nil
	}
	seq := t.rowSeq(r.Tenant, r.Key)
	t.found.ok = false // the row goes: rowSeq must not find it again
	if seq == nil {
		return fmt.Errorf("delete row %s: not stored", r.Key)
	}
	if err := del(bucketRows, bytes.Clone(seq)); err != nil {
		return err
	}
	if err := addCount(t.bucket(bucketMeta), r.Status, -1); err != nil {
		return fmt.Errorf("delete row: %w", err)
	}
	if _, cur, ok := splitLidValue(t.bucket(bucketLocalIDs).Get([]byte(r.MetadataLocalID))); ok && bytes.Equal(cur, rk) {
		if err := del(bucketLocalIDs, []byte(r.MetadataLocalID)); err != nil {
			return err
		}
	}
	if keyIndexed(r) {
		if err := del(bucketKeys, keysKey(r.Key, r.Tenant)); err != nil {
			return err
		}
	}
	if r.Status.Open() {
		if err := del(bucketDue, dueKey(r)); err != nil {
			return err
		}
	}
	if err := del(bucketByTime, byTimeKey(r)); err != nil {
		return err
	}
	if r.Approval != nil {
		if cur := t.bucket(bucketApprovals).Get([]byte(r.Approval.ID)); bytes.Equal(cur, rk) {
			if err := del(bucketApprovals, []byte(r.Approval.ID)); err != nil {
				return err
			}
		}
	}
	if r.ApprovalOpen() {
		if err := del(bucketApprovalsDue, approvalDueKey(r)); err != nil {
			return err
		}
		if err := del(bucketApprovalsByTenant, approvalTenantKey(r)); err != nil {
			return err
		}
	}
	if at, ok := r.SettledAt(); ok {
		if err := del(bucketSettled, settledKey(at, rk)); err != nil {
			return err
		}
	}
	if r.OpenCompensation() {
		if err := del(bucketCompensations, compensationKey(r)); err != nil {
			return err
		}
	}
	if err := t.deleteJournal(r.Tenant, r.Key); err != nil {
		return fmt.Errorf("delete row %s: %w", r.Key, err)
	}
	return t.DeleteOrphans(r.MetadataLocalID)
}

// OldestSettled implements ledger.Retention: the first entry of settled.
func (s *Store) OldestSettled(ctx context.Context) (time.Time, error) {
	var at time.Time
	err := s.view(ctx, func(tx *boltTx) error {
		if k, _ := tx.bucket(bucketSettled).Cursor().First(); len(k) >= 8 {
			at = time.Unix(0, int64(binary.BigEndian.Uint64(k))).UTC()
		}
		return nil
	})
	return at, err
}

// FileStats are what retention's metrics report of the file.
type FileStats struct {
	// Size is the file's data in bytes, up to its high-water mark: the
	// pages ever used, free or not. bbolt never lowers it (compact does);
	// the file on disk may be larger, grown ahead in steps of up to 16 MiB.
	Size int64
	// FreePages are pages free for reuse, PageSize their size: a file
	// with free pages grows only once they are used up.
	FreePages, PageSize int
}

// FileStats returns the file's size and free pages.
func (s *Store) FileStats(ctx context.Context) (FileStats, error) {
	var fs FileStats
	err := s.view(ctx, func(tx *boltTx) error {
		fs.Size = tx.tx.Size()
		return nil
	})
	st := s.db.Stats()
	fs.FreePages, fs.PageSize = st.FreePageN, s.db.Info().PageSize
	return fs, err
}

// checkRetentionIndexes is CheckConsistency's part for retention's
// indexes: each settled row and each open compensation has its entry,
// and no entry dangles (counted, as CheckConsistency does).
func checkRetentionIndexes(tx *boltTx, report func(string, ...any) bool) {
	var settledN, compN int
	settled, comps := tx.bucket(bucketSettled), tx.bucket(bucketCompensations)
	c := tx.bucket(bucketRows).Cursor()
	for seq, v := c.First(); seq != nil; seq, v = c.Next() {
		r, err := decodeRow(v)
		if err != nil {
			continue // reported by the row check
		}
		k := rowKey(r.Tenant, r.Key)
		if at, ok := r.SettledAt(); ok {
			settledN++
			if settled.Get(settledKey(at, k)) == nil && !report("row %q: settled at %s but not in settled", k, at) {
				return
			}
		}
		if r.OpenCompensation() {
			compN++
			if comps.Get(compensationKey(&r)) == nil && !report("row %q: open compensation of %s not in compensations", k, r.CompensationOf) {
				return
			}
		}
	}
	if got := settled.KeyN(); got != settledN {
		report("settled: %d entries, want %d (dangling entries)", got, settledN)
	}
	if got := comps.KeyN(); got != compN {
		report("compensations: %d entries, want %d (dangling entries)", got, compN)
	}
}
