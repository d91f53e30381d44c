-- 0007: the Idempotency-Key records (ledger.IdempotencyTx). One record per
-- scope (the caller's tenant) and SHA-256 of the header's value; the value
-- itself is never stored. The flows write a record in the transaction that
-- writes its row; PruneIdempotency deletes from the old end of at.

CREATE TABLE idempotency (
    scope    text COLLATE "C" NOT NULL,
    key_hash text COLLATE "C" NOT NULL,
    at       timestamptz NOT NULL,
    rec      jsonb NOT NULL,
    PRIMARY KEY (scope, key_hash)
);

CREATE INDEX idempotency_at_idx ON idempotency (at);

-- A COMMIT whose answer was lost is settled by the marker its transaction
-- wrote with it (store.go, settleCommit): a second insert of the marker
-- conflicts if the transaction committed, waits while it is finishing, and
-- takes the marker (so it never commits) if it did not. Markers are read
-- within seconds; PruneIdempotency deletes those older than ten minutes.
CREATE TABLE commit_markers (
    id text COLLATE "C" PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX commit_markers_at_idx ON commit_markers (at);
