-- 0009: a new key's claim as one call (fastclaim.go). It does what the
-- pipeline of a lock SELECT and a CTE did, as one statement the client
-- sends and the server plans once per session: the advisory locks in the
-- order given, the parked-orphan check (a statement of its own, so its
-- snapshot follows the locks: a VOLATILE function takes a new snapshot per
-- statement under READ COMMITTED), the row's INSERT … ON CONFLICT DO
-- NOTHING, and only when that inserted: the outbox records, the
-- Idempotency-Key records (a plain INSERT: a record already there aborts
-- the whole transaction) and the commit marker. Returns false, having
-- written nothing, when a row (or a parked orphan) was there.
--
-- Tables are named without a schema, so they resolve through the
-- caller's search_path as every other statement of the store does.

CREATE FUNCTION recon_claim_new(
    lock_ns int4[], lock_ids int4[],
    p_tenant text, p_key text, p_local_id text, p_status text, p_run_id text,
    p_first_seen_at timestamptz, p_next_check_at timestamptz, p_doc jsonb,
    p_approval_id text, p_approval_expires_at timestamptz,
    check_orphans boolean,
    ev_tenants text[], ev_keys text[], ev_docs text[],
    rec_scopes text[], rec_hashes text[], rec_ats timestamptz[], rec_docs text[],
    marker text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(lock_ns, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(lock_ns[i], lock_ids[i]);
    END LOOP;
    IF check_orphans AND EXISTS (SELECT 1 FROM orphans WHERE local_id = p_local_id) THEN
        RETURN false;
    END IF;
    INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc,
                      approval_id, approval_expires_at)
        VALUES (p_tenant, p_key, p_local_id, p_status, p_run_id, p_first_seen_at, p_next_check_at, p_doc,
                p_approval_id, p_approval_expires_at)
        ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF coalesce(array_length(ev_docs, 1), 0) > 0 THEN
        INSERT INTO outbox (tenant, key, event)
            SELECT u.t, u.k, u.e::jsonb FROM unnest(ev_tenants, ev_keys, ev_docs) WITH ORDINALITY AS u(t, k, e, n)
            ORDER BY u.n;
    END IF;
    IF coalesce(array_length(rec_docs, 1), 0) > 0 THEN
        INSERT INTO idempotency (scope, key_hash, at, rec)
            SELECT u.s, u.h, u.a, u.r::jsonb FROM unnest(rec_scopes, rec_hashes, rec_ats, rec_docs) AS u(s, h, a, r);
    END IF;
    INSERT INTO commit_markers (id) VALUES (marker);
    RETURN true;
END
$$;
