#!/usr/bin/env bash
# bench-http: the HTTP claim API against a bare echo server, in one process
# on loopback (cmd/httpload). Defaults: 64 connections, 2 s warm-up +
# 10 s measured per target, then 5 s of claim + outcome pairs for the relay
# lag; under a minute in all. Extra arguments go to the program, e.g.
#   scripts/bench-http.sh -json
#   scripts/bench-http.sh -cpuprofile cpu.out -skip-bare
# Webhook mode: durable Stripe ingest against the same server's verify-only
# route (50,000 rows are claimed first, 10-30 s on a busy machine):
#   scripts/bench-http.sh -mode webhook -rounds 5
# -unsafe-nosync repeats either mode with the store's fdatasync off: a
# ceiling without durability, printed with no verdict (BENCHMARKS.md).
# The binary is built first so compiling does not share the CPU with the run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
"$GO" build -o "$bin/httpload" ./cmd/httpload
"$bin/httpload" "$@"
