-- 0006: the Idempotency-Key records (ledger.IdempotencyTx). One record per
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
