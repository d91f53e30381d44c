package memstore

import (
	"context"
	"slices"

	"github.com/agentledger/reconciler/ledger"
)

// freezeID names a kill-switch entry.
type freezeID struct{ tenant, target string }

// PutFreeze implements ledger.Freezes.
func (s *Store) PutFreeze(ctx context.Context, f ledger.Freeze) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f.At = f.At.UTC()
	// A plain map write cannot fail half-way, so it needs no undo step.
	return s.update(ctx, func(t *tx) error {
		if t.s.freezes == nil {
			t.s.freezes = map[freezeID]ledger.Freeze{}
		}
		t.s.freezes[freezeID{f.Tenant, f.Target}] = f
		return nil
	})
}

// DeleteFreeze implements ledger.Freezes.
func (s *Store) DeleteFreeze(ctx context.Context, tenant, target string) error {
	if err := ledger.ValidateFreezeID(tenant, target); err != nil {
		return err
	}
	return s.update(ctx, func(t *tx) error {
		delete(t.s.freezes, freezeID{tenant, target})
		return nil
	})
}

// ListFreezes implements ledger.Freezes.
func (s *Store) ListFreezes(ctx context.Context) ([]ledger.Freeze, error) {
	var out []ledger.Freeze
	err := s.view(ctx, func(st *state) error {
		for _, f := range st.freezes {
			out = append(out, f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, ledger.CompareFreezes)
	return out, nil
}
