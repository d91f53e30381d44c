package bolt

import (
	"context"
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The Idempotency-Key records (ledger.IdempotencyTx): one value per key,
// filed under scope \x00 key hash, and an index by the record's last write
// so PruneIdempotency walks only what it removes. The flows write them in
// the same transaction (and group commit) as the row.

var _ ledger.IdempotencyTx = (*boltTx)(nil)

// GetIdempotency implements ledger.IdempotencyTx. The committer runs one
// op at a time, so the read needs no lock.
func (t *boltTx) GetIdempotency(scope, keyHash string) (ledger.IdempotencyRecord, error) {
	v := t.bucket(bucketIdempotency).Get(join(scope, keyHash))
	if v == nil {
		return ledger.IdempotencyRecord{}, ledger.ErrNotFound
	}
	return decodeIdempotency(v)
}

func decodeIdempotency(v []byte) (ledger.IdempotencyRecord, error) {
	var rec ledger.IdempotencyRecord
	if err := unmarshal(v, &rec); err != nil {
		return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", err)
	}
	return rec, nil
}

// PutIdempotency implements ledger.IdempotencyTx, moving the record's
// by-time entry when it is replaced.
func (t *boltTx) PutIdempotency(scope, keyHash string, rec ledger.IdempotencyRecord) error {
	k := join(scope, keyHash)
	b, byTime := t.bucket(bucketIdempotency), t.bucket(bucketIdempotencyByTime)
	v, err := marshal(rec)
	if err != nil {
		return fmt.Errorf("put idempotency record: %w", err)
	}
	t.writes++
	if cur := b.Get(k); cur != nil {
		old, err := decodeIdempotency(cur)
		if err != nil {
			return err
		}
		if err := byTime.Delete(inboxByTimeKey(old.At, k)); err != nil {
			return fmt.Errorf("put idempotency record: %w", err)
		}
	}
	if err := b.Put(k, v); err != nil {
		return fmt.Errorf("put idempotency record: %w", err)
	}
	if err := byTime.Put(inboxByTimeKey(rec.At, k), nil); err != nil {
		return fmt.Errorf("put idempotency record: %w", err)
	}
	return nil
}

// PruneIdempotency forgets the Idempotency-Key records last written before
// cutoff, pruneChunk per group commit, and returns how many it removed.
func (s *Store) PruneIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	n, err := s.pruneByTime(ctx, bucketIdempotencyByTime, bucketIdempotency, cutoff)
	if err != nil {
		return n, fmt.Errorf("prune idempotency records: %w", err)
	}
	return n, nil
}
