package memstore

import (
	"context"
	"slices"

	"github.com/agentledger/reconciler/ledger"
)

// toolID names a registry entry.
type toolID struct{ tenant, name string }

// PutTool implements ledger.Tools.
func (s *Store) PutTool(ctx context.Context, t ledger.Tool) (ledger.Tool, bool, error) {
	if err := t.Validate(); err != nil {
		return ledger.Tool{}, false, err
	}
	var (
		out     ledger.Tool
		changed bool
	)
	// A plain map write cannot fail half-way, so it needs no undo step.
	err := s.update(ctx, func(tx *tx) error {
		id := toolID{t.Tenant, t.Name}
		var old *ledger.Tool
		if cur, ok := tx.s.tools[id]; ok {
			old = &cur
		}
		out, changed = ledger.NextTool(old, t)
		if changed {
			if tx.s.tools == nil {
				tx.s.tools = map[toolID]ledger.Tool{}
			}
			tx.s.tools[id] = out.Clone()
		}
		return nil
	})
	if err != nil {
		return ledger.Tool{}, false, err
	}
	return out, changed, nil
}

// GetTool implements ledger.Tools.
func (s *Store) GetTool(ctx context.Context, tenant, name string) (ledger.Tool, error) {
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return ledger.Tool{}, err
	}
	var out ledger.Tool
	err := s.view(ctx, func(st *state) error {
		t, ok := st.tools[toolID{tenant, name}]
		if !ok {
			return ledger.ErrToolNotFound
		}
		out = t.Clone()
		return nil
	})
	return out, err
}

// DeleteTool implements ledger.Tools.
func (s *Store) DeleteTool(ctx context.Context, tenant, name string) error {
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return err
	}
	return s.update(ctx, func(tx *tx) error {
		id := toolID{tenant, name}
		if _, ok := tx.s.tools[id]; !ok {
			return ledger.ErrToolNotFound
		}
		delete(tx.s.tools, id)
		return nil
	})
}

// ListTools implements ledger.Tools.
func (s *Store) ListTools(ctx context.Context, tenant string) ([]ledger.Tool, error) {
	if tenant != "" {
		if err := ledger.ValidateTenant(tenant); err != nil {
			return nil, err
		}
	}
	var out []ledger.Tool
	err := s.view(ctx, func(st *state) error {
		for id, t := range st.tools {
			if tenant == "" || id.tenant == tenant {
				out = append(out, t.Clone())
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, ledger.CompareTools)
	return out, nil
}
