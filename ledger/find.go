package ledger

import (
	"context"
	"slices"
	"strings"
)

// FindQuery asks for a tenant's rows by one of the fields nothing else
// lists them by. Exactly one of LocalID, ReceiptID and ToolCallID is set.
type FindQuery struct {
	Tenant     string
	LocalID    string // metadata_local_id: the stores' local id index
	ReceiptID  string // upstream_receipt_id: a scan of the tenant's rows
	ToolCallID string // tool_call_id: a scan of the tenant's rows
	// Limit bounds the rows returned (1..MaxListLimit; 0: DefaultListLimit).
	Limit int
}

// Validate checks the query and fills the default limit.
func (q *FindQuery) Validate() error {
	if err := ValidateTenant(q.Tenant); err != nil {
		return err
	}
	n := 0
	for _, v := range []string{q.LocalID, q.ReceiptID, q.ToolCallID} {
		if v != "" {
			n++
			if !printableASCII(v, 1, MaxKeyLen) {
				return ErrInvalidListQuery.With("find: a value is 1-%d printable ASCII characters", MaxKeyLen)
			}
		}
	}
	if n != 1 {
		return ErrInvalidListQuery.With("find: want exactly one of local id, receipt id, tool call id")
	}
	return validatePage(&q.Limit, "")
}

// Match reports whether r is one of the rows q asks for.
func (q FindQuery) Match(r Row) bool {
	if r.Tenant != q.Tenant {
		return false
	}
	switch {
	case q.LocalID != "":
		return r.MetadataLocalID == q.LocalID
	case q.ReceiptID != "":
		return r.UpstreamReceiptID == q.ReceiptID
	default:
		return r.ToolCallID == q.ToolCallID
	}
}

// Answer puts the rows a scan matched in List's order (first_seen_at, then
// key, both descending) and keeps the first Limit: what every store's
// FindRows returns, whatever order its scan met them in.
func (q FindQuery) Answer(rows []Row) []Row {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := b.FirstSeenAt.Compare(a.FirstSeenAt); c != 0 {
			return c
		}
		return strings.Compare(b.Key, a.Key)
	})
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
	}
	return rows
}

// Found is FindRows' answer. Cut is set when the context's deadline ended a
// scan before it read every row: Rows are what it found until then.
type Found struct {
	Rows []Row
	Cut  bool
}

// Finder finds rows by local id, receipt id or tool call id, completely:
// the local id through the store's index; the others by a scan of the
// tenant's rows in one read transaction (bolt, memstore) or one query
// (PostgreSQL). The scan adds no index to the claim or outcome path; its
// cost is O(the tenant's rows), for a person's search, not a hot path.
type Finder interface {
	FindRows(ctx context.Context, q FindQuery) (Found, error)
}

// FindCheckEvery is how many rows a scan reads between looks at its
// context's deadline.
const FindCheckEvery = 1024
