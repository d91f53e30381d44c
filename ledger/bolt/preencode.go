package bolt

import (
	"context"
	"slices"

	"github.com/agentledger/reconciler/ledger"
)

// Encoding a row is the largest single cost of a claim in the committer's
// serial section (7–8 µs of its ~26 µs; BENCHMARKS.md, issue 32). The row
// an autonomous claim inserts is the claim's own row, unchanged
// (ledger.DecideClaim: c.Row.Clone()), so Claim encodes it in the caller's
// goroutine, in parallel with every other caller, and PutRow uses those
// bytes when — and only when — the row it is asked to insert equals the one
// encoded (rowEqual). Any other write (an approval or outbox row, a retry,
// a row the orphans changed after the insert) is encoded in the committer
// as before, so the bytes on disk never depend on the hint.

// preRow is a row encoded ahead of the committer.
type preRow struct {
	row ledger.Row
	v   []byte
}

type preRowKey struct{}

// Claim is ledger.Flows.Claim with the inserted row encoded in the
// caller's goroutine (see above).
func (s *Store) Claim(ctx context.Context, c ledger.Claim) (ledger.ClaimResult, error) {
	if c.Gate.Autonomy == "" || c.Gate.Autonomy == ledger.AutonomyAutonomous {
		if v, err := encodeRow(c.Row); err == nil {
			// c.Row is the caller's: keep a clone, so a caller changing its
			// claim while it waits cannot make the hint stale.
			ctx = context.WithValue(ctx, preRowKey{}, &preRow{row: c.Row.Clone(), v: v})
		}
		// An encoding error is the committer's to report, in order.
	}
	return s.Flows.Claim(ctx, c)
}

// preRowFrom returns the row encoded by Claim for this write, if any.
func preRowFrom(ctx context.Context) *preRow {
	p, _ := ctx.Value(preRowKey{}).(*preRow)
	return p
}

// encodeInsert encodes row for PutRow: the caller's bytes when row is the
// one it encoded, encodeRow otherwise.
func (t *boltTx) encodeInsert(old *ledger.Row, row *ledger.Row) ([]byte, error) {
	if old == nil && t.pre != nil && rowEqual(row, &t.pre.row) {
		if t.store != nil {
			t.store.metrics.preEncoded.Add(1)
		}
		return t.pre.v, nil
	}
	return encodeRow(*row)
}

// rowEqual reports whether a and b encode to the same bytes. It compares
// every field with == (time.Time by its representation, not its instant:
// two representations of one instant compare unequal, which only costs an
// encoding); TestRowEqualCoversEveryField fails when a field is added to
// ledger.Row and not here.
func rowEqual(a, b *ledger.Row) bool {
	return a.Tenant == b.Tenant && a.Key == b.Key && a.IntentFingerprint == b.IntentFingerprint &&
		a.MetadataLocalID == b.MetadataLocalID && a.RunID == b.RunID && a.Tool == b.Tool &&
		a.ToolCallID == b.ToolCallID && a.Vendor == b.Vendor && a.ToolClass == b.ToolClass &&
		a.Status == b.Status && a.Attempt == b.Attempt && a.VendorKey == b.VendorKey &&
		a.UpstreamReceiptID == b.UpstreamReceiptID && a.IdempotentReplayed == b.IdempotentReplayed &&
		ptrEqual(a.VendorShouldRetry, b.VendorShouldRetry) && a.LastHTTPStatus == b.LastHTTPStatus &&
		a.Result == b.Result &&
		a.FirstSeenAt == b.FirstSeenAt && a.UpdatedAt == b.UpdatedAt && a.SucceededAt == b.SucceededAt &&
		a.PagedAt == b.PagedAt && a.PendingUntil == b.PendingUntil && a.ReplayWindowUntil == b.ReplayWindowUntil &&
		a.NextCheckAt == b.NextCheckAt &&
		a.CompensationOf == b.CompensationOf && a.CompensationAction == b.CompensationAction &&
		ptrEqual(a.Request, b.Request) && ptrEqual(a.Expect, b.Expect) && ptrEqual(a.Resolution, b.Resolution) &&
		a.Autonomy == b.Autonomy && ptrEqual(a.Approval, b.Approval) &&
		slices.Equal(a.Alerts, b.Alerts) && (a.Alerts == nil) == (b.Alerts == nil) &&
		a.Traceparent == b.Traceparent
}

func ptrEqual[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}
