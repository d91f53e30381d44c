package memstore

import (
	"context"
	"slices"

	"github.com/agentledger/reconciler/ledger"
)

// GetApproval implements ledger.Approvals.
func (s *Store) GetApproval(ctx context.Context, approvalID string) (ledger.Row, error) {
	if err := ledger.ValidateApprovalID(approvalID); err != nil {
		return ledger.Row{}, err
	}
	var row ledger.Row
	err := s.view(ctx, func(st *state) error {
		id, ok := st.approvals[approvalID]
		if !ok {
			return ledger.ErrApprovalNotFound
		}
		row = st.rows[id].Clone()
		return nil
	})
	return row, err
}

// ListApprovals implements ledger.Approvals: a walk of the open approvals
// by expiry from the cursor, skipping other tenants' when the query names
// one (an in-memory test store can afford the skip).
func (s *Store) ListApprovals(ctx context.Context, q ledger.ApprovalQuery) (ledger.ApprovalPage, error) {
	if err := q.Validate(); err != nil {
		return ledger.ApprovalPage{}, err
	}
	var after *approvalEntry
	if q.Cursor != "" {
		at, tenant, key, err := ledger.DecodeApprovalCursor(q.Tenant, q.Cursor)
		if err != nil {
			return ledger.ApprovalPage{}, err
		}
		after = &approvalEntry{at, rowID{tenant, key}}
	}
	var page ledger.ApprovalPage
	err := s.view(ctx, func(st *state) error {
		i := 0
		if after != nil {
			var found bool
			i, found = slices.BinarySearchFunc(st.open, *after, compareApproval)
			if found {
				i++
			}
		}
		for ; i < len(st.open); i++ {
			e := st.open[i]
			if !q.DueBy.IsZero() && e.at.After(q.DueBy) {
				break
			}
			if q.Tenant != "" && e.id.tenant != q.Tenant {
				continue
			}
			if len(page.Rows) == q.Limit {
				page.NextCursor = ledger.EncodeApprovalCursor(q.Tenant, page.Rows[len(page.Rows)-1])
				break
			}
			page.Rows = append(page.Rows, st.rows[e.id].Clone())
		}
		return nil
	})
	if err != nil {
		return ledger.ApprovalPage{}, err
	}
	return page, nil
}
