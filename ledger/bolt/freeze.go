package bolt

import (
	"context"
	"fmt"

	"github.com/agentledger/reconciler/ledger"
)

// The kill switch lives in the freezes bucket, keyed tenant \x00 target, so
// a cursor walk returns ListFreezes's order (tenant, then target, by bytes)
// without sorting. Writes go through the group committer like every other
// write: an acknowledged freeze is on disk.

// freezeVersion is the version of a freeze value's JSON envelope.
const freezeVersion = 1

type storedFreeze struct {
	V      int           `json:"v"`
	Freeze ledger.Freeze `json:"freeze"`
}

func freezeKey(tenant, target string) []byte { return join(tenant, target) }

func decodeFreeze(v []byte) (ledger.Freeze, error) {
	var s storedFreeze
	if err := unmarshal(v, &s); err != nil {
		return ledger.Freeze{}, fmt.Errorf("decode freeze: %w", err)
	}
	if s.V != freezeVersion {
		return ledger.Freeze{}, fmt.Errorf("decode freeze: unsupported version %d", s.V)
	}
	return s.Freeze, nil
}

// PutFreeze implements ledger.Freezes.
func (s *Store) PutFreeze(ctx context.Context, f ledger.Freeze) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f.At = f.At.UTC()
	v, err := marshal(storedFreeze{V: freezeVersion, Freeze: f})
	if err != nil {
		return fmt.Errorf("put freeze: encode: %w", err)
	}
	err = s.write(ctx, func(tx *boltTx) error {
		tx.writes++ // before the Put: a failed Put may have touched pages
		return tx.bucket(bucketFreezes).Put(freezeKey(f.Tenant, f.Target), v)
	})
	if err != nil {
		return fmt.Errorf("put freeze: %w", err)
	}
	return nil
}

// DeleteFreeze implements ledger.Freezes. Deleting an absent entry writes
// nothing, so it commits nothing.
func (s *Store) DeleteFreeze(ctx context.Context, tenant, target string) error {
	if err := ledger.ValidateFreezeID(tenant, target); err != nil {
		return err
	}
	k := freezeKey(tenant, target)
	err := s.write(ctx, func(tx *boltTx) error {
		b := tx.bucket(bucketFreezes)
		if b.Get(k) == nil {
			return nil
		}
		tx.writes++
		return b.Delete(k)
	})
	if err != nil {
		return fmt.Errorf("delete freeze: %w", err)
	}
	return nil
}

// ListFreezes implements ledger.Freezes with one read transaction.
func (s *Store) ListFreezes(ctx context.Context) ([]ledger.Freeze, error) {
	var out []ledger.Freeze
	err := s.view(ctx, func(tx *boltTx) error {
		return tx.bucket(bucketFreezes).ForEach(func(k, v []byte) error {
			f, err := decodeFreeze(v) // copies: v is bbolt's
			if err != nil {
				return fmt.Errorf("freeze %q: %w", k, err)
			}
			out = append(out, f)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list freezes: %w", err)
	}
	return out, nil
}
