package bolt

import (
	"bytes"
	"context"
	"fmt"

	"github.com/agentledger/reconciler/ledger"
)

// The tool registry lives in the tools bucket, keyed tenant \x00 name, so a
// cursor walk (or a prefix walk for one tenant) returns ListTools's order
// without sorting. Writes go through the group committer: an acknowledged
// registration is on disk.

// toolVersion is the version of a tool value's JSON envelope.
const toolVersion = 1

type storedTool struct {
	V    int         `json:"v"`
	Tool ledger.Tool `json:"tool"`
}

func toolKey(tenant, name string) []byte { return join(tenant, name) }

func decodeTool(v []byte) (ledger.Tool, error) {
	var s storedTool
	if err := unmarshal(v, &s); err != nil {
		return ledger.Tool{}, fmt.Errorf("decode tool: %w", err)
	}
	if s.V != toolVersion {
		return ledger.Tool{}, fmt.Errorf("decode tool: unsupported version %d", s.V)
	}
	return s.Tool, nil
}

// PutTool implements ledger.Tools. An unchanged entry writes nothing. The
// op reads the entry again each time the committer runs it, so a group
// that re-runs gets the same answer.
func (s *Store) PutTool(ctx context.Context, t ledger.Tool) (ledger.Tool, bool, error) {
	if err := t.Validate(); err != nil {
		return ledger.Tool{}, false, err
	}
	k := toolKey(t.Tenant, t.Name)
	var (
		out     ledger.Tool
		changed bool
	)
	err := s.write(ctx, func(tx *boltTx) error {
		b := tx.bucket(bucketTools)
		var old *ledger.Tool
		if v := b.Get(k); v != nil {
			cur, err := decodeTool(v)
			if err != nil {
				return err
			}
			old = &cur
		}
		out, changed = ledger.NextTool(old, t)
		if !changed {
			return nil
		}
		v, err := marshal(storedTool{V: toolVersion, Tool: out})
		if err != nil {
			return fmt.Errorf("encode tool: %w", err)
		}
		tx.writes++ // before the Put: a failed Put may have touched pages
		return b.Put(k, v)
	})
	if err != nil {
		return ledger.Tool{}, false, fmt.Errorf("put tool: %w", err)
	}
	return out, changed, nil
}

// GetTool implements ledger.Tools with one read transaction.
func (s *Store) GetTool(ctx context.Context, tenant, name string) (ledger.Tool, error) {
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return ledger.Tool{}, err
	}
	var out ledger.Tool
	err := s.view(ctx, func(tx *boltTx) error {
		v := tx.bucket(bucketTools).Get(toolKey(tenant, name))
		if v == nil {
			return ledger.ErrToolNotFound
		}
		var err error
		out, err = decodeTool(v) // copies: v is bbolt's
		return err
	})
	if err != nil {
		return ledger.Tool{}, fmt.Errorf("get tool: %w", err)
	}
	return out, nil
}

// DeleteTool implements ledger.Tools.
func (s *Store) DeleteTool(ctx context.Context, tenant, name string) error {
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return err
	}
	k := toolKey(tenant, name)
	err := s.write(ctx, func(tx *boltTx) error {
		b := tx.bucket(bucketTools)
		if b.Get(k) == nil {
			return ledger.ErrToolNotFound
		}
		tx.writes++
		return b.Delete(k)
	})
	if err != nil {
		return fmt.Errorf("delete tool: %w", err)
	}
	return nil
}

// ListTools implements ledger.Tools with one read transaction: a walk of
// the tenant's prefix, or of the whole bucket.
func (s *Store) ListTools(ctx context.Context, tenant string) ([]ledger.Tool, error) {
	var prefix []byte
	if tenant != "" {
		if err := ledger.ValidateTenant(tenant); err != nil {
			return nil, err
		}
		prefix = append([]byte(tenant), sep)
	}
	var out []ledger.Tool
	err := s.view(ctx, func(tx *boltTx) error {
		c := tx.bucket(bucketTools).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			t, err := decodeTool(v)
			if err != nil {
				return fmt.Errorf("tool %q: %w", k, err)
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
