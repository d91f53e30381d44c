package main

import (
	"context"
	"time"
)

// idempotencyPruner is the part of the store the Idempotency-Key pruning
// loop needs (bolt and PostgreSQL both have it).
type idempotencyPruner interface {
	PruneIdempotency(ctx context.Context, cutoff time.Time) (int, error)
}

// pruneIdempotency forgets the Idempotency-Key records last written more
// than retention ago (ledger.IdempotencyRetention: 24 h, or twice a longer
// lease), every ten minutes. A store without records has nothing to prune.
func pruneIdempotency(ctx context.Context, st any, retention time.Duration, now func() time.Time, log interface {
	Info(string, ...any)
	Warn(string, ...any)
}) error {
	p, ok := st.(idempotencyPruner)
	if !ok {
		return nil
	}
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		n, err := p.PruneIdempotency(ctx, now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("idempotency-key pruning failed", "err", err)
		case n > 0:
			log.Info("idempotency keys pruned", "removed", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
