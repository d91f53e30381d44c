-- 0001: the ledger's tables. Text columns that take part in an ordering use
-- COLLATE "C" so PostgreSQL orders them by bytes, exactly as memstore and
-- bolt do (List's "key descending", TenantsOfKey's sorted tenants).

CREATE TABLE rows (
    tenant            text COLLATE "C" NOT NULL,
    key               text COLLATE "C" NOT NULL,
    metadata_local_id text COLLATE "C" NOT NULL,
    status            text NOT NULL CHECK (status IN ('pending', 'unknown', 'succeeded', 'failed_poison')),
    run_id            text COLLATE "C" NOT NULL,
    first_seen_at     timestamptz NOT NULL,
    -- NULL when the row has no next check (settled rows).
    next_check_at     timestamptz,
    -- The whole ledger.Row, versioned: {"v":1,"row":{...}}. The columns
    -- above are copies of its indexed fields, written in the same UPDATE.
    doc               jsonb NOT NULL,
    PRIMARY KEY (tenant, key),
    CONSTRAINT rows_metadata_local_id_key UNIQUE (metadata_local_id)
);

-- The key -> tenants join of a webhook that echoes only the idempotency key.
CREATE INDEX rows_key_idx ON rows (key);
-- The due index: open rows only, so Due and ClaimDue never walk settled rows.
CREATE INDEX rows_due_idx ON rows (next_check_at, tenant, key) WHERE status IN ('pending', 'unknown');
-- List: a tenant's rows newest first.
CREATE INDEX rows_list_idx ON rows (tenant, first_seen_at DESC, key DESC);

CREATE TABLE outbox (
    seq         bigserial PRIMARY KEY,
    tenant      text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    event       jsonb NOT NULL,
    created     timestamptz NOT NULL DEFAULT now(),
    -- Set by ClaimEvents: another replica's relay leaves the record (and
    -- every later record of the same row) alone until then.
    lease_until timestamptz
);

-- Per-row order of outbox records, for ClaimEvents.
CREATE INDEX outbox_key_idx ON outbox (tenant, key, seq);

CREATE TABLE inbox (
    vendor     text COLLATE "C" NOT NULL,
    event_id   text COLLATE "C" NOT NULL,
    first_seen timestamptz NOT NULL,
    result     text NOT NULL,
    PRIMARY KEY (vendor, event_id)
);

-- PruneInbox deletes from the old end.
CREATE INDEX inbox_first_seen_idx ON inbox (first_seen);

CREATE TABLE orphans (
    local_id text COLLATE "C" NOT NULL,
    vendor   text COLLATE "C" NOT NULL,
    event_id text COLLATE "C" NOT NULL,
    at       timestamptz NOT NULL,
    delivery jsonb NOT NULL,
    -- Parking order, the tie-break after at (oldest first).
    parked   bigserial NOT NULL,
    PRIMARY KEY (local_id, vendor, event_id)
);
