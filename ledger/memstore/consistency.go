package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// maxProblems bounds the report of CheckConsistency: the first few
// problems say enough, and a broken index would otherwise list every row.
const maxProblems = 10

// CheckConsistency rebuilds every index from the rows and reports where the
// maintained indexes disagree. storetest calls it after random operations;
// an error means a transaction left an index out of step with its row.
func (s *Store) CheckConsistency(ctx context.Context) error {
	var problems []error
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	err := s.view(ctx, func(st *state) error {
		st.checkRows(report)
		st.checkOutbox(report)
		st.checkInbox(report)
		for lid, ds := range st.orphans {
			if len(ds) == 0 {
				report("orphans: empty list kept under %s", lid)
			}
			for _, d := range ds {
				if d.LocalID != lid {
					report("orphans: delivery %s/%s parked under %s, carries %s", d.Vendor, d.EventID, lid, d.LocalID)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return errors.Join(problems...)
}

func (st *state) checkRows(report func(string, ...any)) {
	wantDue, wantApprovals, wantOpen := 0, 0, 0
	wantSeen := map[string]int{}
	wantTenants := map[string]int{}
	for id, r := range st.rows {
		if r.Tenant != id.tenant || r.Key != id.key {
			report("rows: %v holds the row of %s/%s", id, r.Tenant, r.Key)
		}
		if !r.Status.Valid() {
			report("rows: %v has status %q", id, r.Status)
		}
		if got, ok := st.byLocalID[r.MetadataLocalID]; !ok || got != id {
			report("local id index: %s → %v, want %v", r.MetadataLocalID, got, id)
		}
		if _, found := slices.BinarySearch(st.keyTenants[r.Key], r.Tenant); !found {
			report("key index: %v missing", id)
		}
		wantTenants[r.Key]++
		_, inDue := slices.BinarySearchFunc(st.due, dueEntry{r.NextCheckAt, id}, compareDue)
		if inDue != r.Status.Open() {
			report("due index: %v (status %s) present=%v", id, r.Status, inDue)
		}
		if r.Status.Open() {
			wantDue++
		}
		if _, found := slices.BinarySearchFunc(st.seen[r.Tenant], seenEntry{r.FirstSeenAt, r.Key}, compareSeen); !found {
			report("first_seen index: %v missing", id)
		}
		wantSeen[r.Tenant]++
		if r.Approval != nil {
			wantApprovals++
			if got, ok := st.approvals[r.Approval.ID]; !ok || got != id {
				report("approval index: %s → %v, want %v", r.Approval.ID, got, id)
			}
		}
		if r.ApprovalOpen() {
			wantOpen++
			if _, found := slices.BinarySearchFunc(st.open, approvalEntry{r.Approval.ExpiresAt, id}, compareApproval); !found {
				report("open approvals: %v missing", id)
			}
		}
	}
	if len(st.approvals) != wantApprovals {
		report("approval index: %d entries for %d rows with an approval", len(st.approvals), wantApprovals)
	}
	if len(st.open) != wantOpen || !slices.IsSortedFunc(st.open, compareApproval) {
		report("open approvals: %d entries for %d open approvals (sorted=%v)", len(st.open), wantOpen, slices.IsSortedFunc(st.open, compareApproval))
	}
	if len(st.byLocalID) != len(st.rows) {
		report("local id index: %d entries for %d rows", len(st.byLocalID), len(st.rows))
	}
	for key, ts := range st.keyTenants {
		if len(ts) != wantTenants[key] || !slices.IsSorted(ts) {
			report("key index: %d tenants for %d rows (sorted=%v)", len(ts), wantTenants[key], slices.IsSorted(ts))
		}
	}
	if len(st.due) != wantDue || !slices.IsSortedFunc(st.due, compareDue) {
		report("due index: %d entries for %d open rows (sorted=%v)", len(st.due), wantDue, slices.IsSortedFunc(st.due, compareDue))
	}
	for tenant, es := range st.seen {
		if len(es) != wantSeen[tenant] || !slices.IsSortedFunc(es, compareSeen) {
			report("first_seen index: %d entries for %d rows of a tenant", len(es), wantSeen[tenant])
		}
	}
}

func (st *state) checkOutbox(report func(string, ...any)) {
	for i, r := range st.outbox {
		if r.Seq == 0 || r.Seq > st.lastSeq || i > 0 && r.Seq <= st.outbox[i-1].Seq {
			report("outbox: seq %d at %d is out of order (last seq %d)", r.Seq, i, st.lastSeq)
		}
	}
}

func (st *state) checkInbox(report func(string, ...any)) {
	if len(st.inboxOrder) != len(st.inbox) || !slices.IsSortedFunc(st.inboxOrder, compareInbox) {
		report("inbox order: %d entries for %d records", len(st.inboxOrder), len(st.inbox))
	}
	for _, e := range st.inboxOrder {
		if rec, ok := st.inbox[e.id]; !ok || !rec.FirstSeen.Equal(e.at) {
			report("inbox order: %s/%s not in the inbox at its time", e.id.vendor, e.id.eventID)
		}
	}
}
