// Package replicas is reconciler's end-to-end suite on many replicas and
// its fault tests, each on real `reconciler serve` processes built once
// from ./cmd/reconciler (sharedBinary):
//
//   - TestThreeReplicasKillOne: three replicas share one PostgreSQL
//     database and the machine's NATS (JetStream), a bounded load program
//     spreads claims, outcomes and signed Stripe webhooks over them, and
//     one replica is SIGKILLed mid-run and restarted;
//   - TestReplicaKilledMidResolveTakenOver: a replica SIGKILLed while its
//     resolver holds leased rows; the other takes them over once the lease
//     ends, not before;
//   - TestDatabaseRestartUnderLoad: a private PostgreSQL (initdb, pg_ctl)
//     stopped fast and immediate under load;
//   - TestNATSNodeLost: a three-node JetStream cluster of its own
//     (internal/natstest.StartCluster, whose nodes are this test binary
//     re-executed: TestMain) with the stream at three replicas, one node
//     SIGKILLed mid-burst of webhooks, then two; on bbolt and PostgreSQL.
//
// It also holds the replica benchmarks (claims/s on PostgreSQL vs bbolt vs
// a bare INSERT … ON CONFLICT DO NOTHING loop, and 1 vs 3 replicas through
// HTTP). `make test-faults` runs the fault tests alone; `make test` runs
// them with everything else.
//
// The package has no code outside its tests. Every test skips with -short;
// all but TestNATSNodeLost's bbolt case skip without
// RECONCILER_TEST_POSTGRES_URL. Those on the machine's NATS use
// nats://127.0.0.1:4222 (override with RECONCILER_TEST_NATS_URL) with a
// fresh stream name and subject prefix per run, deleted at the end.
// TestNATSNodeLost and TestReplicaKilledMidResolveTakenOver run in
// parallel, after the others.
//
// Imports (tests): the standard library, ledger, ledger/bolt,
// ledger/postgres, fixtures, internal/pgtest (a fresh database per test),
// internal/natstest, internal/fakestripe, pgx and nats.go. Every process
// and goroutine a test starts is stopped by the test's cleanup.
package replicas
