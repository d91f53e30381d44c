package memstore

import (
	"context"

	"github.com/agentledger/reconciler/ledger"
)

// CountRows returns how many rows hold each status.
func (s *Store) CountRows(ctx context.Context) (map[ledger.Status]int64, error) {
	all := ledger.Statuses()
	out := make(map[ledger.Status]int64, len(all))
	for _, st := range all {
		out[st] = 0
	}
	err := s.view(ctx, func(st *state) error {
		for _, r := range st.rows {
			out[r.Status]++
		}
		return nil
	})
	return out, err
}
