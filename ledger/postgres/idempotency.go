package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// lockIdempotency is the advisory-lock namespace of Idempotency-Key
// records: scope \x00 key hash. Two sends of one key, on any replica,
// queue here, and the later one reads what the first committed.
const lockIdempotency = 0x52454305

var _ ledger.IdempotencyTx = (*pgTx)(nil)

// GetIdempotency implements ledger.IdempotencyTx: in a write transaction
// the advisory lock and the read go in one round trip, as lockedRow's do.
func (t *pgTx) GetIdempotency(scope, keyHash string) (ledger.IdempotencyRecord, error) {
	const q = `SELECT rec FROM idempotency WHERE scope = $1 AND key_hash = $2`
	var doc []byte
	var err error
	if err := t.flush(); err != nil {
		return ledger.IdempotencyRecord{}, err
	}
	if t.write {
		b := &pgx.Batch{}
		queueLock(b, lockIdempotency, pairName(scope, keyHash))
		b.Queue(q, scope, keyHash)
		br := t.q.SendBatch(t.ctx, b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return ledger.IdempotencyRecord{}, dbErr("advisory lock", err)
		}
		err = br.QueryRow().Scan(&doc)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	} else {
		err = t.q.QueryRow(t.ctx, q, scope, keyHash).Scan(&doc)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.IdempotencyRecord{}, ledger.ErrNotFound
	}
	if err != nil {
		return ledger.IdempotencyRecord{}, dbErr("get idempotency record", err)
	}
	var rec ledger.IdempotencyRecord
	if err := json.Unmarshal(doc, &rec); err != nil {
		return ledger.IdempotencyRecord{}, fmt.Errorf("decode idempotency record: %w", err)
	}
	return rec, nil
}

// putIdempotencySQL writes a record. GetIdempotency took the key's lock in
// the transaction, so the upsert races nobody.
const putIdempotencySQL = `INSERT INTO idempotency (scope, key_hash, at, rec) VALUES ($1, $2, $3, $4::jsonb)
	ON CONFLICT (scope, key_hash) DO UPDATE SET at = EXCLUDED.at, rec = EXCLUDED.rec`

// PutIdempotency implements ledger.IdempotencyTx. Nothing in the flow
// reads the record after it, so in a write transaction it is sent with the
// COMMIT, in the same round trip (pgTx.atCommit).
func (t *pgTx) PutIdempotency(scope, keyHash string, rec ledger.IdempotencyRecord) error {
	doc, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode idempotency record: %w", err)
	}
	return t.atCommitOrExec("put idempotency record", putIdempotencySQL, scope, keyHash, micros(rec.At), string(doc))
}

// PruneIdempotency deletes the Idempotency-Key records last written before
// cutoff, oldest first, pruneChunk per transaction: O(removed). It also
// deletes the commit markers older than markerRetention (they are not
// counted).
func (s *Store) PruneIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	if err := s.pruneMarkers(ctx); err != nil {
		return 0, err
	}
	return s.pruneChunks(ctx, "prune idempotency records", `DELETE FROM idempotency WHERE (scope, key_hash) IN (
		SELECT scope, key_hash FROM idempotency WHERE at < $1 ORDER BY at LIMIT $2)`, cutoff)
}

// markerRetention is how long a commit marker is kept: far longer than a
// settleCommit can take (the store's retry time).
const markerRetention = 10 * time.Minute

// pruneMarkers deletes the commit markers older than markerRetention, by
// the server's clock, pruneChunk per statement.
func (s *Store) pruneMarkers(ctx context.Context) error {
	for {
		// Any pruneChunk of the old ones, found through the BRIN index on
		// at (migration 0010): an order would sort every old marker.
		tag, err := s.pool.Exec(ctx, `DELETE FROM commit_markers WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM commit_markers WHERE at < now() - make_interval(secs => $1) LIMIT $2))`,
			markerRetention.Seconds(), pruneChunk)
		if err != nil {
			return fmt.Errorf("prune commit markers: %w", dbErr("prune commit markers", err))
		}
		if tag.RowsAffected() < pruneChunk {
			return nil
		}
	}
}
