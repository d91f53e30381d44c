package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/agentledger/reconciler/ledger"
)

// The approval gate's indexes: approvals maps every approval id to its
// row; approvals_due and approvals_by_tenant hold the open approvals
// (ledger.Row.ApprovalOpen) keyed by expiry, across tenants for the expiry
// job and per tenant for GET /v1/approvals, so ListApprovals walks only
// the page it returns.

// approvalDueKey is be64(expires_at) ‖ tenant \x00 key.
func approvalDueKey(r *ledger.Row) []byte {
	b := make([]byte, 0, 8+len(r.Tenant)+1+len(r.Key))
	b = appendUint64(b, timeKey(r.Approval.ExpiresAt))
	return append(b, rowKey(r.Tenant, r.Key)...)
}

// approvalTenantKey is tenant \x00 be64(expires_at) ‖ key.
func approvalTenantKey(r *ledger.Row) []byte {
	b := make([]byte, 0, len(r.Tenant)+1+8+len(r.Key))
	b = append(append(b, r.Tenant...), sep)
	b = appendUint64(b, timeKey(r.Approval.ExpiresAt))
	return append(b, r.Key...)
}

// putApprovalIndexes moves row's approval index entries (old as read in
// this transaction, nil for an insert). An approval's id never changes.
func (t *boltTx) putApprovalIndexes(old, row *ledger.Row, rk []byte) error {
	if row.Approval != nil && (old == nil || old.Approval == nil) {
		ids := t.bucket(bucketApprovals)
		if cur := ids.Get([]byte(row.Approval.ID)); cur != nil && !bytes.Equal(cur, rk) {
			return fmt.Errorf("approval id %s in use", row.Approval.ID)
		}
		if err := ids.Put([]byte(row.Approval.ID), rk); err != nil {
			return err
		}
	}
	wasOpen, isOpen := old != nil && old.ApprovalOpen(), row.ApprovalOpen()
	if wasOpen && isOpen && old.Approval.ExpiresAt.Equal(row.Approval.ExpiresAt) {
		return nil
	}
	due, byTenant := t.bucket(bucketApprovalsDue), t.bucket(bucketApprovalsByTenant)
	if wasOpen {
		if err := due.Delete(approvalDueKey(old)); err != nil {
			return err
		}
		if err := byTenant.Delete(approvalTenantKey(old)); err != nil {
			return err
		}
	}
	if isOpen {
		if err := due.Put(approvalDueKey(row), nil); err != nil {
			return err
		}
		if err := byTenant.Put(approvalTenantKey(row), nil); err != nil {
			return err
		}
	}
	return nil
}

// RowByApproval implements ledger.Tx.
func (t *boltTx) RowByApproval(id string) (ledger.Row, error) {
	rk := t.bucket(bucketApprovals).Get([]byte(id))
	if rk == nil {
		return ledger.Row{}, ledger.ErrApprovalNotFound
	}
	v, err := t.rowValueRK(rk)
	if err != nil {
		return ledger.Row{}, err
	}
	if v == nil {
		return ledger.Row{}, fmt.Errorf("approval %s: dangling index entry", id)
	}
	return decodeRow(v)
}

// GetApproval implements ledger.Approvals with one read transaction.
func (s *Store) GetApproval(ctx context.Context, id string) (ledger.Row, error) {
	if err := ledger.ValidateApprovalID(id); err != nil {
		return ledger.Row{}, err
	}
	var row ledger.Row
	err := s.view(ctx, func(tx *boltTx) error {
		var err error
		row, err = tx.RowByApproval(id)
		return err
	})
	if err != nil {
		return ledger.Row{}, fmt.Errorf("get approval: %w", err)
	}
	return row, nil
}

// ListApprovals implements ledger.Approvals: a forward walk of
// approvals_by_tenant under the tenant's prefix, or of approvals_due, from
// the cursor, stopping after the page (or at the first entry past DueBy).
func (s *Store) ListApprovals(ctx context.Context, q ledger.ApprovalQuery) (ledger.ApprovalPage, error) {
	if err := q.Validate(); err != nil {
		return ledger.ApprovalPage{}, err
	}
	bucket, prefix := bucketApprovalsDue, []byte(nil)
	if q.Tenant != "" {
		bucket, prefix = bucketApprovalsByTenant, append([]byte(q.Tenant), sep)
	}
	start := prefix
	var after []byte
	if q.Cursor != "" {
		at, tenant, key, err := ledger.DecodeApprovalCursor(q.Tenant, q.Cursor)
		if err != nil {
			return ledger.ApprovalPage{}, err
		}
		if q.Tenant != "" && tenant != q.Tenant {
			return ledger.ApprovalPage{}, ledger.ErrInvalidListQuery.With("cursor")
		}
		after = appendUint64(append([]byte(nil), prefix...), timeKey(at))
		if q.Tenant != "" {
			after = append(after, key...)
		} else {
			after = append(after, rowKey(tenant, key)...)
		}
		start = after
	}
	until := uint64(0)
	if !q.DueBy.IsZero() {
		until = timeKey(q.DueBy)
	}
	var page ledger.ApprovalPage
	err := s.view(ctx, func(tx *boltTx) error {
		c := tx.bucket(bucket).Cursor()
		k, _ := c.Seek(start)
		if after != nil && bytes.Equal(k, after) {
			k, _ = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			pos := k[len(prefix):]
			if len(pos) < 9 {
				return fmt.Errorf("%s entry %q: malformed", bucket, k)
			}
			if until != 0 && binary.BigEndian.Uint64(pos[:8]) > until {
				break
			}
			rk := pos[8:]
			if q.Tenant != "" {
				rk = rowKey(q.Tenant, string(pos[8:]))
			}
			v, err := tx.rowValueRK(rk)
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("%s entry %q: dangling", bucket, k)
			}
			if len(page.Rows) == q.Limit {
				page.NextCursor = ledger.EncodeApprovalCursor(q.Tenant, page.Rows[len(page.Rows)-1])
				return nil
			}
			r, err := decodeRow(v)
			if err != nil {
				return err
			}
			page.Rows = append(page.Rows, r)
		}
		return nil
	})
	if err != nil {
		return ledger.ApprovalPage{}, fmt.Errorf("list approvals: %w", err)
	}
	return page, nil
}
