// Package replicas is reconciler's end-to-end suite on many replicas: three
// `reconciler serve` processes built from ./cmd/reconciler share one
// PostgreSQL database and the machine's NATS (JetStream), a bounded load
// program spreads claims, outcomes and signed Stripe webhooks over them,
// and one replica is SIGKILLed mid-run and restarted. It also holds the
// replica benchmarks (claims/s on PostgreSQL vs bbolt vs a bare INSERT …
// ON CONFLICT DO NOTHING loop, and 1 vs 3 replicas through HTTP).
//
// The package has no code outside its tests. Tests skip without
// RECONCILER_TEST_POSTGRES_URL and with -short; they use NATS at
// nats://127.0.0.1:4222 (override with RECONCILER_TEST_NATS_URL) with a
// fresh stream name and subject prefix per run, deleted at the end.
//
// Imports (tests): the standard library, ledger, ledger/bolt,
// ledger/postgres, fixtures, internal/pgtest (a fresh database per test),
// pgx and nats.go. Every process and goroutine a test starts is stopped by
// the test's cleanup.
package replicas
