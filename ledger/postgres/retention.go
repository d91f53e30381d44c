package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// Retention (ledger.Retention) reads the indexes of migration 0006: settled
// rows by recon_settled_at(doc), open compensations by original. Every
// replica may run the job: a delete is conditional (the row unchanged, still
// expired, nothing holding it) under the row's advisory lock, so two
// replicas deleting the same batch delete each row once.

// retentionHeld is the SQL condition of a row r that retention must keep
// whatever its age: an outbox record waits for a relay (a queued work item
// is one), or an open compensation names it as its original.
const retentionHeld = `(EXISTS (SELECT 1 FROM outbox o WHERE o.tenant = r.tenant AND o.key = r.key)
	OR EXISTS (SELECT 1 FROM rows c WHERE c.tenant = r.tenant AND c.status IN ('pending', 'unknown')
		AND c.doc->'row' ? 'compensation_of' AND c.doc->'row'->>'compensation_of' = r.key))`

// ExpiredRows implements ledger.Retention.
func (s *Store) ExpiredRows(ctx context.Context, cutoff time.Time, limit int) ([]ledger.Row, error) {
	var out []ledger.Row
	err := s.run(ctx, false, func(tx *pgTx) error {
		out = out[:0]
		rs, err := tx.q.Query(tx.ctx, `SELECT doc FROM rows r
			WHERE status IN ('succeeded', 'failed_poison') AND recon_settled_at(doc) < $1 AND NOT `+retentionHeld+`
			ORDER BY recon_settled_at(doc), tenant, key LIMIT $2`, cutoff.UTC(), limit)
		if err != nil {
			return dbErr("expired rows", err)
		}
		docs, err := pgx.CollectRows(rs, pgx.RowTo[[]byte])
		if err != nil {
			return dbErr("expired rows", err)
		}
		for _, d := range docs {
			r, err := decodeRow(d)
			if err != nil {
				return err
			}
			if ledger.Expired(r, cutoff) {
				out = append(out, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expired rows: %w", err)
	}
	return out, nil
}

// DeleteExpired implements ledger.Retention: one transaction that locks
// each row as the flows do (advisory lock, in key order so two deleters
// cannot deadlock) and deletes it only if its document still says what
// the caller read, with the deliveries parked under its local id.
func (s *Store) DeleteExpired(ctx context.Context, cutoff time.Time, rows []ledger.Row) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b ledger.Row) int {
		return strings.Compare(pairName(a.Tenant, a.Key), pairName(b.Tenant, b.Key))
	})
	var n int
	err := s.run(ctx, true, func(tx *pgTx) error {
		n = 0
		b := &pgx.Batch{}
		for _, r := range sorted {
			if !ledger.Expired(r, cutoff) {
				continue
			}
			queueLock(b, lockRow, pairName(r.Tenant, r.Key))
			b.Queue(`WITH d AS (
					DELETE FROM rows r WHERE tenant = $1 AND key = $2 AND status = $3
						AND doc->'row'->'updated_at' = to_jsonb($4::text)
						AND recon_settled_at(doc) < $5 AND NOT `+retentionHeld+`
					RETURNING metadata_local_id),
				o AS (DELETE FROM orphans WHERE local_id IN (SELECT metadata_local_id FROM d)),
				j AS (DELETE FROM row_journal WHERE tenant = $1 AND key = $2 AND EXISTS (SELECT 1 FROM d))
				SELECT count(*) FROM d`,
				r.Tenant, r.Key, string(r.Status), r.UpdatedAt.Format(time.RFC3339Nano), cutoff.UTC())
		}
		if b.Len() == 0 {
			return nil
		}
		br := tx.q.SendBatch(tx.ctx, b)
		var errs []error
		for i := 0; i < b.Len(); i += 2 {
			if _, err := br.Exec(); err != nil {
				errs = append(errs, dbErr("advisory lock", err))
				break
			}
			var k int
			if err := br.QueryRow().Scan(&k); err != nil {
				errs = append(errs, dbErr("delete expired row", err))
				break
			}
			n += k
		}
		if err := br.Close(); err != nil && len(errs) == 0 {
			errs = append(errs, dbErr("delete expired rows", err))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return 0, fmt.Errorf("delete expired rows: %w", err)
	}
	return n, nil
}

// OldestSettled implements ledger.Retention.
func (s *Store) OldestSettled(ctx context.Context) (time.Time, error) {
	var at *time.Time
	err := s.run(ctx, false, func(tx *pgTx) error {
		err := tx.q.QueryRow(tx.ctx, `SELECT min(recon_settled_at(doc)) FROM rows WHERE status IN ('succeeded', 'failed_poison')`).Scan(&at)
		if err != nil {
			return dbErr("oldest settled row", err)
		}
		return nil
	})
	if err != nil || at == nil {
		return time.Time{}, err
	}
	return at.UTC(), nil
}
