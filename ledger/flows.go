package ledger

import (
	"context"
	"fmt"
	"time"
)

// Updater runs fn inside one write transaction of a store: committed, and
// durable, when fn returns nil; rolled back otherwise. A store may run fn
// more than once (a group commit that retries), which the flows allow.
type Updater func(ctx context.Context, fn func(Tx) error) error

// Flows gives a store the write methods of Store — Claim, Report, Apply,
// Ingest, Escalate, Reschedule, RedriveOrphans, DecideApproval — from its
// Updater: each
// runs the ledger's one flow for it, in one transaction. A store embeds
// Flows, so a backend writes only its Tx and its Updater (see "For store
// authors" in the package documentation).
type Flows struct {
	Update Updater
	// Policy is the policy the store was opened with; the flows apply it.
	Policy Policy
}

// Claim is Store.Claim, run in one transaction.
func (f Flows) Claim(ctx context.Context, c Claim) (ClaimResult, error) {
	var res ClaimResult
	idem, withKey := IdempotencyFrom(ctx)
	err := f.Update(ctx, func(tx Tx) error {
		var err error
		if withKey {
			res, err = idempotentClaimTx(tx, c, f.Policy, idem)
		} else {
			res, err = claimTx(tx, c, f.Policy)
		}
		return err
	})
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	return res, nil
}

// Report is Store.Report, run in one transaction.
func (f Flows) Report(ctx context.Context, tenant, key string, o Outcome) (Row, Change, error) {
	return f.applyLike(ctx, "report", func(tx Tx) (Row, Change, error) { return reportTx(tx, tenant, key, o, f.Policy) })
}

// DecideApproval is Store.DecideApproval, run in one transaction.
func (f Flows) DecideApproval(ctx context.Context, d ApprovalDecision) (Row, Change, error) {
	return f.applyLike(ctx, "decide approval", func(tx Tx) (Row, Change, error) { return decideApprovalTx(tx, d) })
}

// Apply is Store.Apply, run in one transaction, with the journal entries
// ctx carries (WithJournal).
func (f Flows) Apply(ctx context.Context, tenant, key string, ev Evidence) (Row, Change, error) {
	notes := journalFrom(ctx)
	return f.applyLike(ctx, "apply", func(tx Tx) (Row, Change, error) {
		row, ch, err := applyTx(tx, tenant, key, ev, f.Policy)
		if err == nil {
			err = writeJournal(tx, tenant, key, notes)
		}
		return row, ch, err
	})
}

// applyLike runs a flow that changes one row; with an Idempotency-Key in
// ctx, a resend of it applies nothing (idempotentRowTx).
func (f Flows) applyLike(ctx context.Context, op string, flow func(Tx) (Row, Change, error)) (Row, Change, error) {
	var (
		row Row
		ch  Change
	)
	idem, withKey := IdempotencyFrom(ctx)
	err := f.Update(ctx, func(tx Tx) error {
		var err error
		if withKey {
			row, ch, err = idempotentRowTx(tx, idem, flow)
		} else {
			row, ch, err = flow(tx)
		}
		return err
	})
	if err != nil {
		return Row{}, Change{}, fmt.Errorf("%s: %w", op, err)
	}
	return row, ch, nil
}

// RedriveBatch bounds the local ids one redrive transaction looks at.
const RedriveBatch = 100

// RedriveOrphans is Store.RedriveOrphans: it applies the deliveries parked
// under every local id, RedriveBatch local ids per transaction, and sums the
// batches. On an error it returns what the committed batches did.
func (f Flows) RedriveOrphans(ctx context.Context) (RedriveResult, error) {
	var total RedriveResult
	after := ""
	for {
		var (
			res  RedriveResult
			next string
		)
		err := f.Update(ctx, func(tx Tx) error {
			var err error
			res, next, err = redriveTx(tx, after, RedriveBatch, f.Policy)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("redrive: %w", err)
		}
		total.LocalIDs += res.LocalIDs
		total.StillParked += res.StillParked
		total.Rows = append(total.Rows, res.Rows...)
		if next == "" {
			return total, nil
		}
		after = next
	}
}

// InTx runs fn in one write transaction of the store, outside the flows and
// their rules: for tests and repair tools that must build a state the flows
// never leave behind. Nothing in the service calls it.
func (f Flows) InTx(ctx context.Context, fn func(Tx) error) error { return f.Update(ctx, fn) }

// Ingest is Store.Ingest, run in one transaction.
func (f Flows) Ingest(ctx context.Context, d Delivery) (IngestResult, error) {
	var res IngestResult
	err := f.Update(ctx, func(tx Tx) error {
		var err error
		res, err = ingestTx(tx, d, f.Policy)
		return err
	})
	if err != nil {
		return IngestResult{}, fmt.Errorf("ingest: %w", err)
	}
	return res, nil
}

// Escalate is Store.Escalate, run in one transaction, with the journal
// entries ctx carries (WithJournal: why the row is paged) when it pages.
func (f Flows) Escalate(ctx context.Context, tenant, key string, at time.Time) (Row, bool, error) {
	var (
		row Row
		ok  bool
	)
	notes := journalFrom(ctx)
	err := f.Update(ctx, func(tx Tx) error {
		var err error
		row, ok, err = escalateTx(tx, tenant, key, at)
		if err == nil && ok {
			err = writeJournal(tx, tenant, key, notes)
		}
		return err
	})
	if err != nil {
		return Row{}, false, fmt.Errorf("escalate: %w", err)
	}
	return row, ok, nil
}

// Reschedule is Store.Reschedule, run in one transaction, with the journal
// entries ctx carries (WithJournal).
func (f Flows) Reschedule(ctx context.Context, tenant, key string, next time.Time) error {
	notes := journalFrom(ctx)
	if err := f.Update(ctx, func(tx Tx) error { return rescheduleTx(tx, tenant, key, next, notes) }); err != nil {
		return fmt.Errorf("reschedule: %w", err)
	}
	return nil
}
