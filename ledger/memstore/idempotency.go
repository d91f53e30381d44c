package memstore

import (
	"context"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// idempotencyID files an Idempotency-Key record: scope and key hash.
type idempotencyID struct{ scope, keyHash string }

var _ ledger.IdempotencyTx = (*tx)(nil)

// GetIdempotency implements ledger.IdempotencyTx; the store's mutex is
// held for the whole transaction, which is the lock.
func (t *tx) GetIdempotency(scope, keyHash string) (ledger.IdempotencyRecord, error) {
	rec, ok := t.s.idempotency[idempotencyID{scope, keyHash}]
	if !ok {
		return ledger.IdempotencyRecord{}, ledger.ErrNotFound
	}
	return rec, nil
}

// PutIdempotency implements ledger.IdempotencyTx.
func (t *tx) PutIdempotency(scope, keyHash string, rec ledger.IdempotencyRecord) error {
	if t.s.idempotency == nil {
		t.s.idempotency = map[idempotencyID]ledger.IdempotencyRecord{}
	}
	id := idempotencyID{scope, keyHash}
	u := idemUndo{id: id}
	if prev, had := t.s.idempotency[id]; had {
		u.prev = &prev // a resend's: the first send's record is new
	}
	t.s.idempotency[id] = rec
	t.idemUndo = append(t.idemUndo, u)
	return nil
}

// idemUndo is the undo step of one PutIdempotency: the record it replaced,
// or nil. A pointer, not the record: a claim's first send replaces none,
// and its step is then a fifth of the size.
type idemUndo struct {
	id   idempotencyID
	prev *ledger.IdempotencyRecord
}

func (u idemUndo) apply(s *state) {
	if u.prev != nil {
		s.idempotency[u.id] = *u.prev
	} else {
		delete(s.idempotency, u.id)
	}
}

// PruneIdempotency forgets the records last written before cutoff. It
// scans them all: the memory store holds a test's worth.
func (s *Store) PruneIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	err := s.update(ctx, func(t *tx) error {
		for id, rec := range t.s.idempotency {
			if rec.At.Before(cutoff) {
				delete(t.s.idempotency, id)
				n++
			}
		}
		return nil // not journalled: nothing after this can fail
	})
	return n, err
}
