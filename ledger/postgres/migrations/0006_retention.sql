-- 0006: retention (docs/architecture.md §15). A settled row's settled_at is
-- the time of the evidence that closed it, in its document
-- (row.resolution.at, RFC 3339 in UTC). The function is IMMUTABLE so an
-- index can use it: the text always carries its offset ("Z"), so the cast
-- does not depend on the session's TimeZone.

CREATE FUNCTION recon_settled_at(doc jsonb) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (doc->'row'->'resolution'->>'at')::timestamptz $$;

-- ExpiredRows walks settled rows from the oldest.
CREATE INDEX rows_settled_idx ON rows (recon_settled_at(doc), tenant, key)
    WHERE status IN ('succeeded', 'failed_poison');

-- A row with an open compensation is kept: the compensations of a row.
CREATE INDEX rows_open_compensations_idx ON rows (tenant, (doc->'row'->>'compensation_of'))
    WHERE status IN ('pending', 'unknown') AND doc->'row' ? 'compensation_of';
