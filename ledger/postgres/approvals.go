package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// The approval gate's reads go through the columns of migration 0004: the
// approval_id unique index, and the two partial indexes on
// approval_expires_at, which is set only while an approval is open.

// GetApproval implements ledger.Approvals with one read statement.
func (s *Store) GetApproval(ctx context.Context, id string) (ledger.Row, error) {
	if err := ledger.ValidateApprovalID(id); err != nil {
		return ledger.Row{}, err
	}
	var row ledger.Row
	err := s.run(ctx, false, func(tx *pgTx) error {
		var err error
		row, err = tx.oneRow("get approval", `SELECT doc FROM rows WHERE approval_id = $1`, id)
		if errors.Is(err, ledger.ErrNotFound) {
			return ledger.ErrApprovalNotFound
		}
		return err
	})
	if err != nil {
		return ledger.Row{}, fmt.Errorf("get approval: %w", err)
	}
	return row, nil
}

// ListApprovals implements ledger.Approvals through the partial index of
// open approvals by expiry (per tenant, or across tenants), one extra row
// telling whether another page exists. Replicas' expiry jobs read the same
// rows; each expiry is a conditional update of one row (DecideApproval
// changes nothing twice), so they need no lease.
func (s *Store) ListApprovals(ctx context.Context, q ledger.ApprovalQuery) (ledger.ApprovalPage, error) {
	if err := q.Validate(); err != nil {
		return ledger.ApprovalPage{}, err
	}
	if s.closed.Load() {
		return ledger.ApprovalPage{}, fmt.Errorf("list approvals: %w", errClosed)
	}
	var sb strings.Builder
	sb.WriteString(`SELECT doc FROM rows WHERE approval_expires_at IS NOT NULL`)
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Tenant != "" {
		fmt.Fprintf(&sb, ` AND tenant = %s`, arg(q.Tenant))
	}
	if !q.DueBy.IsZero() {
		fmt.Fprintf(&sb, ` AND approval_expires_at <= %s`, arg(micros(q.DueBy)))
	}
	if q.Cursor != "" {
		at, tenant, key, err := ledger.DecodeApprovalCursor(q.Tenant, q.Cursor)
		if err != nil {
			return ledger.ApprovalPage{}, err
		}
		fmt.Fprintf(&sb, ` AND (approval_expires_at, tenant, key) > (%s, %s, %s)`, arg(micros(at)), arg(tenant), arg(key))
	}
	fmt.Fprintf(&sb, ` ORDER BY approval_expires_at, tenant, key LIMIT %s`, arg(q.Limit+1))
	var page ledger.ApprovalPage
	err := s.run(ctx, false, func(tx *pgTx) error {
		rows, err := queryRows(tx, "list approvals", sb.String(), args...)
		if err != nil {
			return err
		}
		if len(rows) > q.Limit {
			rows = rows[:q.Limit]
			last := rows[len(rows)-1].Clone()
			last.Approval.ExpiresAt = micros(last.Approval.ExpiresAt)
			page.NextCursor = ledger.EncodeApprovalCursor(q.Tenant, last)
		}
		page.Rows = rows
		return nil
	})
	if err != nil {
		return ledger.ApprovalPage{}, fmt.Errorf("list approvals: %w", err)
	}
	return page, nil
}
