#!/usr/bin/env bash
# The figures of BENCHMARKS.md: the bbolt store's Claim and Report with 1, 8,
# 64 and 256 concurrent callers, next to two baselines measured in the same
# run (bbolt's own db.Batch writing the same bytes, and a hand-rolled
# PostgreSQL INSERT … ON CONFLICT DO NOTHING claim), the bbolt options the
# store sets (BenchmarkClaimOptions), and the due-index scan in a 1,000-row
# and a 1,001,000-row file. Prints the ratios at the end.
#
#   ./scripts/bench.sh                      (make bench)
#   ROUNDS=1 BENCHTIME=1s ./scripts/bench.sh
#   BENCH='Claim|BatchBaseline' DUE=0 ./scripts/bench.sh
#
# The write benchmarks run ROUNDS times (default 3), one after another in
# each round, and the table shows the median of each: on a shared machine
# the load changes from minute to minute, and interleaving the rounds gives
# the store and its baselines the same conditions. The due benchmark runs
# once (it builds a 1.3 GiB file first, about 30 s).
#
# The PostgreSQL baseline reads RECONCILER_TEST_POSTGRES_URL, which defaults
# here to the local trust-auth server (postgres@127.0.0.1:5432/test); the
# benchmark skips itself when the server is unreachable.
set -euo pipefail
cd "$(dirname "$0")/.."

benchtime=${BENCHTIME:-2s}
rounds=${ROUNDS:-3}
pattern=${BENCH:-Claim|ClaimOptions|Report|BatchBaseline|PostgresClaim}
due=${DUE:-1}
: "${RECONCILER_TEST_POSTGRES_URL:=postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
export RECONCILER_TEST_POSTGRES_URL

out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "# $(date -u +%FT%TZ) $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go env GOVERSION)"
for r in $(seq "$rounds"); do
	echo "# round $r/$rounds: go test -run '^\$' -bench '^Benchmark($pattern)\$' -benchtime $benchtime ./ledger/bolt/ (load $(cut -d' ' -f1 /proc/loadavg))"
	go test -run '^$' -bench "^Benchmark($pattern)\$" -benchtime "$benchtime" -timeout 60m ./ledger/bolt/ | tee -a "$out"
done
if [[ $due == 1 ]]; then
	echo "# go test -run '^\$' -bench '^BenchmarkDue\$' -benchtime $benchtime ./ledger/bolt/"
	go test -run '^$' -bench '^BenchmarkDue$' -benchtime "$benchtime" -timeout 60m ./ledger/bolt/ | tee -a "$out"
fi
echo "# done $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# Each result line: name iterations value unit value unit …; collect the
# throughput (…/s) and ns/op of every round, then print medians.
awk '
	/^Benchmark/ {
		name = $1; sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i += 2) {
			if ($(i+1) ~ /\/s$/) rate[name] = rate[name] " " $i
			if ($(i+1) == "ns/op") ns[name] = ns[name] " " $i
		}
	}
	function median(list,    v, n, i, j, t) {
		n = split(list, v, " ")
		if (n == 0) return ""
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
		return (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
	}
	function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "n/a" : sprintf("%.2fx", a / b) }
	END {
		print ""
		printf "medians of %s round(s)\n", rounds
		printf "%-8s %14s %14s %14s %14s %12s %12s\n", "callers", "store claim/s", "store report/s", "batch write/s", "pg claim/s", "store/batch", "store/pg"
		n = split("1 8 64 256", callers, " ")
		for (j = 1; j <= n; j++) {
			c = "callers=" callers[j]
			s = median(rate["BenchmarkClaim/" c]); r = median(rate["BenchmarkReport/" c])
			bt = median(rate["BenchmarkBatchBaseline/" c]); pg = median(rate["BenchmarkPostgresClaim/" c])
			printf "%-8s %14s %14s %14s %14s %12s %12s\n", callers[j], s, r, bt, (pg == "" ? "skipped" : pg), ratio(s, bt), ratio(s, pg)
		}
		d = median(rate["BenchmarkClaimOptions/default"])
		if (d != "") {
			f = median(rate["BenchmarkClaimOptions/freelist_sync"]); m = median(rate["BenchmarkClaimOptions/small_mmap"])
			printf "\nbbolt options, 64 callers and a due-index reader: default %s claims/s, freelist_sync %s (%s), small_mmap %s (%s)\n", d, f, ratio(f, d), m, ratio(m, d)
		}
		small = median(ns["BenchmarkDue/rows=1k"]); big = median(ns["BenchmarkDue/rows=1M+1k"])
		if (small != "" && big != "")
			printf "\ndue scan of 1,000 rows: %.2f ms in a 1k-row file, %.2f ms in a 1M+1k-row file: due-big/due-small %s\n", small / 1e6, big / 1e6, ratio(big, small)
	}
' rounds="$rounds" "$out"
