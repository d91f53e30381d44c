package memstore

import (
	"context"

	"github.com/agentledger/reconciler/ledger"
)

// CountRows returns how many rows hold each status.
func (s *Store) CountRows(ctx context.Context) (map[ledger.Status]int64, error) {
	out := map[ledger.Status]int64{
		ledger.StatusPending: 0, ledger.StatusUnknown: 0, ledger.StatusSucceeded: 0, ledger.StatusFailedPoison: 0,
	}
	err := s.view(ctx, func(st *state) error {
		for _, r := range st.rows {
			out[r.Status]++
		}
		return nil
	})
	return out, err
}
