package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentledger/reconciler/ledger"
)

// maxProblems bounds the report of CheckConsistency.
const maxProblems = 20

// CheckConsistency scans the whole file in one read transaction and checks
// that every index agrees with the rows: each row is found by its key and
// its local id at its own sequence (the row indexes and the rows are a
// bijection), and holds a sequence the bucket has handed out; the due index holds exactly the open rows
// under their next_check_at; by_time holds exactly one entry per row under
// its first_seen_at; every approval is found by its id, and the approval
// indexes hold exactly the open approvals under their expiry; no index
// entry dangles. It also checks that the inbox
// and its time index agree and that every outbox and orphan record decodes.
//
// Dangling entries are found by counting: every row's expected entry is
// looked up, and entries are unique per row, so an index with as many
// entries as rows that expect one has no extra entry.
func (s *Store) CheckConsistency(ctx context.Context) error {
	var problems []error
	err := s.view(ctx, func(tx *boltTx) error {
		var err error
		problems, err = tx.checkConsistency(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("check consistency: %w", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("check consistency: %w", errors.Join(problems...))
	}
	return nil
}

// checkConsistency is CheckConsistency inside a read transaction (also
// CheckFile's, on a file no store has open).
func (tx *boltTx) checkConsistency(ctx context.Context) ([]error, error) {
	var problems []error
	report := func(format string, args ...any) bool {
		problems = append(problems, fmt.Errorf(format, args...))
		return len(problems) < maxProblems
	}
	err := func() error {
		b := func(name []byte) kvBucket { return tx.bucket(name) }
		if v := b(bucketMeta).Get(metaSchemaVersion); string(v) != strconv.Itoa(schemaVersion) {
			report("meta: schema_version %q, want %d", v, schemaVersion)
		}
		if tx.tx.Bucket(bucketRowsV2) != nil || b(bucketMeta).Get(metaMigrating) != nil {
			report("the migration to schema %d is unfinished (the schema-2 rows bucket or the migrating marker is there)", schemaVersion)
		}
		var rowsN, openN, keyedN, approvalsN, openApprovalsN int
		byStatus := map[ledger.Status]int64{}
		lids, keys, due, byTime := b(bucketLocalIDs), b(bucketKeys), b(bucketDue), b(bucketByTime)
		rowsB := b(bucketRows)
		c := rowsB.Cursor()
		for seq, v := c.First(); seq != nil; seq, v = c.Next() {
			if rowsN%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			rowsN++
			if len(seq) != 8 {
				if !report("row %q: key is not a sequence number", seq) {
					return nil
				}
				continue
			}
			if n := binary.BigEndian.Uint64(seq); n > rowsB.Sequence() {
				if !report("row %d: beyond the bucket sequence %d", n, rowsB.Sequence()) {
					return nil
				}
			}
			r, err := decodeRow(v)
			if err != nil {
				if !report("row %d: %v", binary.BigEndian.Uint64(seq), err) {
					return nil
				}
				continue
			}
			byStatus[r.Status]++
			k := rowKey(r.Tenant, r.Key)
			ok := true
			// The row indexes and the rows are a bijection: every row is
			// found by its key (rowSeq) and its local id at its own
			// sequence; with the counts below, no entry is left over.
			if got := tx.rowSeq(r.Tenant, r.Key); !bytes.Equal(got, seq) {
				ok = report("row %q at %d: its key finds sequence %x", k, binary.BigEndian.Uint64(seq), got)
			}
			if got := lids.Get([]byte(r.MetadataLocalID)); !bytes.Equal(got, lidValue(seq, k)) {
				ok = report("row %q: local id %s points to %q", k, r.MetadataLocalID, got)
			}
			if keyIndexed(&r) {
				keyedN++
			}
			if got := keys.Get(keysKey(r.Key, r.Tenant)); (got != nil) != keyIndexed(&r) || got != nil && !bytes.Equal(got, seq) {
				ok = report("row %q: key index entry %x, want one %v at %x", k, got, keyIndexed(&r), seq)
			}
			if r.Status.Open() {
				openN++
				if due.Get(dueKey(&r)) == nil {
					ok = report("row %q: open (%s) but not due at %s", k, r.Status, r.NextCheckAt)
				}
			}
			if byTime.Get(byTimeKey(&r)) == nil {
				ok = report("row %q: missing from by_time at %s", k, r.FirstSeenAt)
			}
			if r.Approval != nil {
				approvalsN++
				if got := b(bucketApprovals).Get([]byte(r.Approval.ID)); !bytes.Equal(got, k) {
					ok = report("row %q: approval %s points to %q", k, r.Approval.ID, got)
				}
			}
			if r.ApprovalOpen() {
				openApprovalsN++
				if b(bucketApprovalsDue).Get(approvalDueKey(&r)) == nil || b(bucketApprovalsByTenant).Get(approvalTenantKey(&r)) == nil {
					ok = report("row %q: open approval missing from the approval indexes at %s", k, r.Approval.ExpiresAt)
				}
			}
			if !ok {
				return nil
			}
		}
		for _, idx := range []struct {
			name []byte
			want int
		}{{bucketLocalIDs, rowsN}, {bucketKeys, keyedN}, {bucketDue, openN}, {bucketByTime, rowsN},
			{bucketApprovals, approvalsN}, {bucketApprovalsDue, openApprovalsN}, {bucketApprovalsByTenant, openApprovalsN}} {
			if got := b(idx.name).KeyN(); got != idx.want {
				if !report("%s: %d entries, want %d (dangling entries)", idx.name, got, idx.want) {
					return nil
				}
			}
		}

		for _, st := range allStatuses {
			if got := readCount(b(bucketMeta), st); got != byStatus[st] {
				if !report("row count of %s is %d, the rows hold %d", st, got, byStatus[st]) {
					return nil
				}
			}
		}

		checkRetentionIndexes(tx, report)
		if len(problems) >= maxProblems {
			return nil
		}

		inbox, inboxN := b(bucketInbox), 0
		ic := inbox.Cursor()
		for k, v := ic.First(); k != nil; k, v = ic.Next() {
			inboxN++
			rec, err := decodeInbox(v)
			if err != nil {
				if !report("inbox %q: %v", k, err) {
					return nil
				}
				continue
			}
			if b(bucketInboxByTime).Get(inboxByTimeKey(rec.FirstSeen, k)) == nil {
				if !report("inbox %q: missing from inbox_by_time", k) {
					return nil
				}
			}
		}
		if got := b(bucketInboxByTime).KeyN(); got != inboxN {
			report("inbox_by_time: %d entries, want %d (dangling entries)", got, inboxN)
		}

		ob := b(bucketOutbox)
		oc := ob.Cursor()
		for k, v := oc.First(); k != nil; k, v = oc.Next() {
			var e ledger.Event
			if len(k) != 8 {
				report("outbox key %q: not a sequence number", k)
			} else if seq := binary.BigEndian.Uint64(k); seq > ob.Sequence() {
				report("outbox %d: beyond the bucket sequence %d", seq, ob.Sequence())
			}
			if err := unmarshal(v, &e); err != nil {
				report("outbox %q: %v", k, err)
			}
			if len(problems) >= maxProblems {
				return nil
			}
		}

		orc := b(bucketOrphans).Cursor()
		for k, v := orc.First(); k != nil; k, v = orc.Next() {
			var d ledger.Delivery
			if err := unmarshal(v, &d); err != nil {
				report("orphan %q: %v", k, err)
			} else if !bytes.Equal(k, orphanKey(d)) {
				report("orphan %q: holds %s/%s/%s", k, d.LocalID, d.Vendor, d.EventID)
			}
			if len(problems) >= maxProblems {
				return nil
			}
		}
		return nil
	}()
	return problems, err
}
