// Package memstore is an in-memory ledger.Store for tests and for the
// packages that need a real Store without a disk (api, matcher, resolver,
// drills).
//
// It keeps the same indexes the durable stores keep (local id, key to
// tenants, due by next_check_at over open rows only, first_seen for List,
// outbox by sequence, inbox by first-seen time for PruneInbox, parked
// orphans) and runs the shared flows of ledger/txn.go over them, so it obeys
// exactly the rules ledger/bolt and ledger/postgres obey and passes
// ledger/storetest. Nothing survives the process.
//
// Imports: the standard library and ledger only.
//
// Concurrency: every method is safe for concurrent use. One mutex serialises
// all transactions, which makes every method atomic and the store trivially
// linearizable; a transaction writes through an undo journal, so a flow that
// fails half-way leaves no trace. Notify's channel is signalled after a
// commit that appended outbox records.
package memstore
