// Package matcher turns a verified, normalised vendor event into the
// ledger.Delivery a store ingests: it looks the event type up in a per-vendor
// table (succeeded, failed, progress or ignore) and fills the evidence the
// ledger applies to the joined row.
//
// It decides nothing that the ledger decides: the join on the local id or
// the echoed key, the tenant check, orphan parking and the monotonic
// transition rules run inside the store's Ingest (the ledger's shared
// flow), one transaction with the inbox and the outbox, in every store.
//
// Imports: the standard library and ledger only. It does no I/O.
//
// Concurrency: Match is a pure function. A Table is read-only once built and
// may then be shared by any number of goroutines; building one (NewTable,
// Set) is not safe concurrently with reads.
package matcher
