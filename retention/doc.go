// Package retention runs the embedded store's retention job
// (docs/architecture.md §15): settled rows (succeeded, failed_poison) whose
// settled_at is older than Options.SettledRows are deleted, a small batch
// at a time, with every index entry the store keeps for them. The store
// decides what it must keep whatever the age (ledger.Retention): an open
// compensation's original, a row whose event the relay has not published
// (a queued work item is one).
//
// A sweep reads a batch of expired rows from a snapshot, appends them to
// the archive when Options.ArchiveDir is set (one JSON object per line in
// rows-YYYY-MM-DD.jsonl, UTC date of the sweep, fsynced before anything is
// deleted), then asks the store to delete them: one short write per batch,
// so the bolt committer is never held for more than a batch. The store
// deletes only rows that did not change since they were read, so a row
// archived and then kept (a late webhook) may appear in the archive twice;
// the last line of a key is the one deleted.
//
// Metrics: reconciler_retention_rows_deleted_total, the age of the oldest
// settled row kept, and, for a store that reports them (bolt), the file's
// size and its free pages.
//
// Imports: ledger, internal/promreg, the Prometheus client and the
// standard library.
//
// Concurrency: Run is one goroutine; Sweep must not run concurrently with
// itself on one Job.
package retention
