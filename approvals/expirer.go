package approvals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/ledger"
)

// Store is what the Expirer needs of a store (ledger.Approvals has it).
type Store interface {
	ListApprovals(ctx context.Context, q ledger.ApprovalQuery) (ledger.ApprovalPage, error)
	DecideApproval(ctx context.Context, d ledger.ApprovalDecision) (ledger.Row, ledger.Change, error)
}

// Expirer defaults.
const (
	DefaultExpiryInterval = 10 * time.Second
	DefaultExpiryBatch    = 100
)

// ExpirerOptions configure an Expirer. Zero values take the defaults.
type ExpirerOptions struct {
	// Interval between passes (default DefaultExpiryInterval): how late,
	// at most, a request expires after its time when no claim asks first.
	Interval time.Duration
	// Batch is how many due approvals one read of the index returns.
	Batch int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives failures and the count of each pass that expired any.
	Logger *slog.Logger
	// Expired is called after each expiry this Expirer committed (the API
	// wakes the claims long-polling the row); nil: nothing.
	Expired func(tenant, key string)
	// TracerProvider receives an approval span per expiry (tracing.go);
	// nil: none.
	TracerProvider trace.TracerProvider
}

// Expirer expires approval requests whose time ran out.
type Expirer struct {
	store  Store
	o      ExpirerOptions
	tracer trace.Tracer
}

// NewExpirer returns an Expirer over st. It starts nothing: call Run.
func NewExpirer(st Store, o ExpirerOptions) *Expirer {
	if o.Interval <= 0 {
		o.Interval = DefaultExpiryInterval
	}
	if o.Batch <= 0 {
		o.Batch = DefaultExpiryBatch
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Expired == nil {
		o.Expired = func(string, string) {}
	}
	return &Expirer{store: st, o: o, tracer: tracerOf(o.TracerProvider)}
}

// Run runs a pass every Interval until ctx ends, then returns nil. A
// failed pass is logged; the next one starts over.
func (x *Expirer) Run(ctx context.Context) error {
	t := time.NewTicker(x.o.Interval)
	defer t.Stop()
	for {
		n, err := x.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			x.o.Logger.Warn("approvals: expiry pass failed", "expired", n, "err", err)
		case n > 0:
			x.o.Logger.Info("approvals: requests expired", "expired", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass expires every approval due at now, a page at a time, and returns
// how many it expired. One that fails is skipped for this pass (and
// counted in the error); the rest go on.
func (x *Expirer) Pass(ctx context.Context) (int, error) {
	now := x.o.Now().UTC()
	q := ledger.ApprovalQuery{DueBy: now, Limit: x.o.Batch}
	n := 0
	var errs []error
	for {
		page, err := x.store.ListApprovals(ctx, q)
		if err != nil {
			return n, errors.Join(append(errs, fmt.Errorf("list due approvals: %w", err))...)
		}
		for _, row := range page.Rows {
			sctx, span := x.startExpiry(ctx, row)
			got, ch, err := x.store.DecideApproval(sctx, ledger.ApprovalDecision{ID: row.Approval.ID, Verdict: ledger.VerdictExpire, At: now})
			endExpiry(span, got, err)
			if err != nil {
				if ctx.Err() != nil {
					return n, errors.Join(append(errs, err)...)
				}
				errs = append(errs, fmt.Errorf("expire %s: %w", row.Approval.ID, err))
				continue
			}
			if got.Approval.State == ledger.ApprovalExpired && ch.Event != nil {
				n++
				x.o.Logger.InfoContext(sctx, "approvals: request expired", "tenant", got.Tenant, "key", got.Key, "run_id", got.RunID, "approval_id", got.Approval.ID)
				x.o.Expired(got.Tenant, got.Key)
			}
		}
		if page.NextCursor == "" {
			return n, errors.Join(errs...)
		}
		q.Cursor = page.NextCursor
	}
}
