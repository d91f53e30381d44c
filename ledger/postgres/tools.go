package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// The tool registry is the tools table (migration 0003). PutTool reads the
// entry FOR UPDATE and writes it in one transaction, so two replicas
// replacing one entry at once serialise, and each version follows the one
// before; two registering a new name race on the primary key, and the
// loser re-runs and replaces (or keeps) the winner's entry.

// toolDoc is the stored form of an entry; v lets the format change.
type toolDoc struct {
	V    int         `json:"v"`
	Tool ledger.Tool `json:"tool"`
}

const toolDocVersion = 1

func decodeTool(b []byte) (ledger.Tool, error) {
	var d toolDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return ledger.Tool{}, fmt.Errorf("decode tool: %w", err)
	}
	if d.V != toolDocVersion {
		return ledger.Tool{}, fmt.Errorf("decode tool: version %d, this build reads %d", d.V, toolDocVersion)
	}
	return d.Tool, nil
}

// PutTool implements ledger.Tools.
func (s *Store) PutTool(ctx context.Context, t ledger.Tool) (ledger.Tool, bool, error) {
	if err := t.Validate(); err != nil {
		return ledger.Tool{}, false, err
	}
	var (
		out     ledger.Tool
		changed bool
	)
	err := s.run(ctx, true, func(tx *pgTx) error {
		var old *ledger.Tool
		var doc []byte
		err := tx.q.QueryRow(tx.ctx, `SELECT doc FROM tools WHERE tenant = $1 AND name = $2 FOR UPDATE`, t.Tenant, t.Name).Scan(&doc)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return dbErr("get tool", err)
		default:
			cur, err := decodeTool(doc)
			if err != nil {
				return err
			}
			old = &cur
		}
		out, changed = ledger.NextTool(old, t)
		if !changed {
			return nil
		}
		b, err := json.Marshal(toolDoc{V: toolDocVersion, Tool: out})
		if err != nil {
			return fmt.Errorf("encode tool: %w", err)
		}
		if old != nil {
			_, err := tx.q.Exec(tx.ctx, `UPDATE tools SET version = $3, doc = $4::jsonb WHERE tenant = $1 AND name = $2`, t.Tenant, t.Name, out.Version, string(b))
			if err != nil {
				return dbErr("update tool", err)
			}
			return nil
		}
		tag, err := tx.q.Exec(tx.ctx, `INSERT INTO tools (tenant, name, version, doc) VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT DO NOTHING`,
			t.Tenant, t.Name, out.Version, string(b))
		if err != nil {
			return dbErr("insert tool", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("insert tool %s: %w", t.Name, errRace)
		}
		return nil
	})
	if err != nil {
		return ledger.Tool{}, false, fmt.Errorf("put tool: %w", err)
	}
	return out, changed, nil
}

// GetTool implements ledger.Tools with one read statement.
func (s *Store) GetTool(ctx context.Context, tenant, name string) (ledger.Tool, error) {
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return ledger.Tool{}, err
	}
	var out ledger.Tool
	err := s.run(ctx, false, func(tx *pgTx) error {
		var doc []byte
		err := tx.q.QueryRow(tx.ctx, `SELECT doc FROM tools WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return ledger.ErrToolNotFound
		}
		if err != nil {
			return dbErr("get tool", err)
		}
		out, err = decodeTool(doc)
		return err
	})
	if err != nil {
		return ledger.Tool{}, fmt.Errorf("get tool: %w", err)
	}
	return out, nil
}

// DeleteTool implements ledger.Tools with one statement.
func (s *Store) DeleteTool(ctx context.Context, tenant, name string) error {
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return err
	}
	err := s.run(ctx, true, func(tx *pgTx) error {
		tag, err := tx.q.Exec(tx.ctx, `DELETE FROM tools WHERE tenant = $1 AND name = $2`, tenant, name)
		if err != nil {
			return dbErr("delete tool", err)
		}
		if tag.RowsAffected() == 0 {
			return ledger.ErrToolNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete tool: %w", err)
	}
	return nil
}

// ListTools implements ledger.Tools with one read statement.
func (s *Store) ListTools(ctx context.Context, tenant string) ([]ledger.Tool, error) {
	if tenant != "" {
		if err := ledger.ValidateTenant(tenant); err != nil {
			return nil, err
		}
	}
	var out []ledger.Tool
	err := s.run(ctx, false, func(tx *pgTx) error {
		rows, err := tx.q.Query(tx.ctx, `SELECT doc FROM tools WHERE $1 = '' OR tenant = $1 ORDER BY tenant, name`, tenant)
		if err != nil {
			return dbErr("list tools", err)
		}
		docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			return dbErr("list tools", err)
		}
		out = make([]ledger.Tool, 0, len(docs))
		for _, d := range docs {
			t, err := decodeTool(d)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	return out, nil
}
