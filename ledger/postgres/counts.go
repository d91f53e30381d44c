package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// CountRows returns how many rows hold each status. It is a GROUP BY over
// the rows table: scrapes of reconciler_rows pay a scan, which the caller
// bounds with a timeout and a cache (a counter row updated by every claim
// would serialise every replica's writes on one hot row instead).
func (s *Store) CountRows(ctx context.Context) (map[ledger.Status]int64, error) {
	all := ledger.Statuses()
	out := make(map[ledger.Status]int64, len(all))
	for _, st := range all {
		out[st] = 0
	}
	err := s.run(ctx, false, func(tx *pgTx) error {
		rs, err := tx.q.Query(tx.ctx, `SELECT status, count(*) FROM rows GROUP BY status`)
		if err != nil {
			return dbErr("count rows", err)
		}
		type pair struct {
			Status string
			N      int64
		}
		pairs, err := pgx.CollectRows(rs, pgx.RowToStructByPos[pair])
		if err != nil {
			return dbErr("count rows", err)
		}
		for _, p := range pairs {
			out[ledger.Status(p.Status)] = p.N
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count rows: %w", err)
	}
	return out, nil
}
