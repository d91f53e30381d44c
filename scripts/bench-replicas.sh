#!/usr/bin/env bash
# The replica figures of issue 7: claims/s from 64 concurrent callers on the
# PostgreSQL store vs the bbolt store vs a bare INSERT … ON CONFLICT DO
# NOTHING loop (one process, one run: BenchmarkClaims64), then POST
# /v1/claims through HTTP against 1 and 3 `reconciler serve` processes on
# one PostgreSQL database (BenchmarkHTTPClaims). Prints the ratios.
#
#   ./scripts/bench-replicas.sh
#   ROUNDS=1 N=2000 ./scripts/bench-replicas.sh
#
# Needs PostgreSQL (RECONCILER_TEST_POSTGRES_URL, default the local
# trust-auth server) and NATS with JetStream at nats://127.0.0.1:4222
# (RECONCILER_TEST_NATS_URL) for the HTTP part.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${N:-3000}
rounds=${ROUNDS:-3}
: "${RECONCILER_TEST_POSTGRES_URL:=postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
export RECONCILER_TEST_POSTGRES_URL

out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench 'Claims64|HTTPClaims' -benchtime "${n}x" -count "$rounds" -timeout 30m ./e2e/replicas/ | tee "$out"

# Median claims/s per benchmark, then the ratios.
awk '
/claims\/s/ {
	name=$1; sub(/-[0-9]+$/, "", name)
	for (i = 2; i < NF; i++) if ($(i+1) == "claims/s") v[name] = v[name] " " $i
}
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
	for (k in v) { m[k] = median(v[k]); printf "%-48s %10.0f claims/s (median of%s)\n", k, m[k], v[k] }
	pg = m["BenchmarkClaims64/store=postgres"]; bo = m["BenchmarkClaims64/store=bolt"]; bare = m["BenchmarkClaims64/bare_insert"]
	r1 = m["BenchmarkHTTPClaims/replicas=1"]; r3 = m["BenchmarkHTTPClaims/replicas=3"]
	if (pg && bare) printf "postgres store / bare insert: %.2f\n", pg / bare
	if (bo && pg) printf "bolt store / postgres store:  %.2f\n", bo / pg
	if (bo && bare) printf "bolt store / bare insert:     %.2f\n", bo / bare
	if (r1 && r3) printf "3 replicas / 1 replica:       %.2f\n", r3 / r1
}' "$out"
