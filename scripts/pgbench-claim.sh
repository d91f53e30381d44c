#!/usr/bin/env bash
# What a new key's claim costs PostgreSQL itself, against a bare insert
# (issue 31, BENCHMARKS.md "One call instead of a pipeline…"): one pgbench
# client, the WAL flush left out (synchronous_commit=off), three scripts in
# alternating rounds on a scratch database with the store's migrations:
#
#   bare   one INSERT … ON CONFLICT DO NOTHING into a table shaped like
#          cmd/httpload's pgx claim service (four indexes)
#   rows   the same row into the store's rows table (its indexes)
#   claim  the store's one statement: SELECT recon_claim_new(…) with the
#          key's and the local id's locks and the orphan check
#
#   ./scripts/pgbench-claim.sh              # 3 rounds of 5 s each
#   ROUNDS=5 SECONDS_PER=10 ./scripts/pgbench-claim.sh
#
# Needs psql and pgbench on PATH (Debian: /usr/lib/postgresql/*/bin) and a
# server at PGHOST/PGPORT/PGUSER (default 127.0.0.1:5432, postgres, trust).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
secs=${SECONDS_PER:-5}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
db="pgbench_claim_$$"
dir=$(mktemp -d)
trap 'psql -qd postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null; rm -rf "$dir"' EXIT

psql -qd postgres -c "CREATE DATABASE $db"
for f in ledger/postgres/migrations/*.sql; do
	psql -qd "$db" -v ON_ERROR_STOP=1 -f "$f"
done
psql -qd "$db" -v ON_ERROR_STOP=1 -c "
CREATE TABLE bare (tenant text NOT NULL, key text NOT NULL, local_id text NOT NULL UNIQUE,
  status text NOT NULL, next_check_at timestamptz, first_seen_at timestamptz NOT NULL, row jsonb NOT NULL,
  PRIMARY KEY (tenant, key));
CREATE INDEX bare_due ON bare (next_check_at) WHERE status IN ('pending','unknown');
CREATE INDEX bare_by_time ON bare (tenant, first_seen_at);"

# A claim's document as the store writes it (about 800 bytes).
doc='{"v":1,"row":{"tenant":"acme","key":"k","intent_fingerprint":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","metadata_local_id":"rcn_x","run_id":"run_load","tool":"stripe.payment_intents.create","tool_call_id":"call_123456","vendor":"stripe","tool_class":"write_idempotent","status":"pending","attempt":1,"first_seen_at":"2026-12-03T17:00:00Z","updated_at":"2026-12-03T17:00:00Z","pending_until":"2026-12-03T17:15:00Z","replay_window_until":"2026-12-04T17:00:00Z","next_check_at":"2026-12-03T17:15:00Z","request":{"method":"POST","path":"/v1/payment_intents","content_type":"application/x-www-form-urlencoded","body":"amount=1234&currency=usd&customer=cus_123"}}}'
key="'key_' || :k || md5(random()::text)"
lid="'rcn_' || md5(random()::text)"
cat > "$dir/bare.sql" <<EOF
\set k random(1, 1000000000)
INSERT INTO bare (tenant, key, local_id, status, next_check_at, first_seen_at, row)
  VALUES ('acme', $key, $lid, 'pending', now() + interval '15 min', now(), '$doc'::jsonb) ON CONFLICT DO NOTHING;
EOF
cat > "$dir/rows.sql" <<EOF
\set k random(1, 1000000000)
INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc)
  VALUES ('acme', $key, $lid, 'pending', 'run_load', now(), now() + interval '15 min', '$doc'::jsonb) ON CONFLICT DO NOTHING;
EOF
# The lock namespaces are ledger/postgres's lockRow and lockLocalID.
cat > "$dir/claim.sql" <<EOF
\set k random(1, 1000000000)
SELECT recon_claim_new(ARRAY[$((0x52454301)), $((0x52454302))]::int4[], ARRAY[:k, :k + 7]::int4[],
  'acme', $key, $lid, 'pending', 'run_load', now(), now() + interval '15 min', '$doc'::jsonb, NULL, NULL, true,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  lpad(to_hex((extract(epoch from clock_timestamp()) * 1000000)::bigint), 16, '0') || left(md5(random()::text), 16));
EOF

export PGOPTIONS='-c synchronous_commit=off'
for r in $(seq "$rounds"); do
	for s in bare rows claim; do
		lat=$(pgbench -n -M prepared -c 1 -T "$secs" -f "$dir/$s.sql" "$db" 2>&1 | sed -n 's/^latency average = //p')
		printf 'round %d  %-5s  %s\n' "$r" "$s" "$lat"
	done
done
