package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// The kill switch is the freezes table (migration 0002). Each call is one
// statement, so it is atomic on its own; a replica sees another's change on
// its next ListFreezes (freeze.Cache reloads every few seconds).

// PutFreeze implements ledger.Freezes as an upsert.
func (s *Store) PutFreeze(ctx context.Context, f ledger.Freeze) error {
	if err := f.Validate(); err != nil {
		return err
	}
	err := s.run(ctx, true, func(tx *pgTx) error {
		_, err := tx.q.Exec(tx.ctx, `INSERT INTO freezes (tenant, target, actor, note, at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant, target) DO UPDATE SET actor = excluded.actor, note = excluded.note, at = excluded.at`,
			f.Tenant, f.Target, f.Actor, f.Note, micros(f.At))
		if err != nil {
			return dbErr("put freeze", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put freeze: %w", err)
	}
	return nil
}

// DeleteFreeze implements ledger.Freezes; deleting nothing is not an error.
func (s *Store) DeleteFreeze(ctx context.Context, tenant, target string) error {
	if err := ledger.ValidateFreezeID(tenant, target); err != nil {
		return err
	}
	err := s.run(ctx, true, func(tx *pgTx) error {
		if _, err := tx.q.Exec(tx.ctx, `DELETE FROM freezes WHERE tenant = $1 AND target = $2`, tenant, target); err != nil {
			return dbErr("delete freeze", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete freeze: %w", err)
	}
	return nil
}

// ListFreezes implements ledger.Freezes with one read statement.
func (s *Store) ListFreezes(ctx context.Context) ([]ledger.Freeze, error) {
	var out []ledger.Freeze
	err := s.run(ctx, false, func(tx *pgTx) error {
		rows, err := tx.q.Query(tx.ctx, `SELECT tenant, target, actor, note, at FROM freezes ORDER BY tenant, target`)
		if err != nil {
			return dbErr("list freezes", err)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Freeze, error) {
			var f ledger.Freeze
			var at time.Time
			if err := r.Scan(&f.Tenant, &f.Target, &f.Actor, &f.Note, &at); err != nil {
				return ledger.Freeze{}, err
			}
			f.At = at.UTC()
			return f, nil
		})
		if err != nil {
			return dbErr("list freezes", err)
		}
		out = got
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list freezes: %w", err)
	}
	return out, nil
}
