// Package bolt is the embedded ledger.Store: one bbolt file, one process.
// It implements ledger.Tx over a bbolt read-write transaction and embeds
// ledger.Flows, which runs the ledger's shared flows (claim, report, apply,
// ingest, escalate, reschedule, redrive) inside it, so the rules are
// ledger's, not ours.
//
// Imports: the standard library, ledger, go.etcd.io/bbolt and
// go-json-experiment/json (encoding/json's format on a faster engine; json.go) only.
//
// # Layout
//
// Every value is JSON but the row counts; rows are versioned
// ({"v":1,"row":{…}}) and the meta bucket holds the schema version (Open
// refuses a newer one) and the row count of each status. Keys join
// validated printable-ASCII parts with \x00 and times as 8-byte big-endian
// Unix nanoseconds, so byte order is the order each index needs:
//
//	rows           tenant \x00 key                      → {"v":1,"row":…}
//	local_ids      metadata_local_id                    → tenant \x00 key
//	keys           key \x00 tenant                      → (joins on an echoed key; business keys only —
//	                                                     a minted key is found through its local id)
//	due            next_check_at ‖ tenant \x00 key      → (open rows only)
//	by_time        tenant \x00 first_seen_at ‖ key      → (List, newest first)
//	outbox         seq (bucket.NextSequence)            → ledger.Event
//	inbox          vendor \x00 event id                 → ledger.InboxRecord
//	inbox_by_time  first_seen ‖ vendor \x00 event id    → (PruneInbox is O(pruned))
//	orphans        local id \x00 vendor \x00 event id   → ledger.Delivery
//	freezes        tenant \x00 tool or class            → ledger.Freeze (the kill switch)
//	tools          tenant \x00 name                     → ledger.Tool (the tool registry)
//	approvals      approval id                          → tenant \x00 key
//	approvals_due  expires_at ‖ tenant \x00 key         → (open approvals only: the expiry job)
//	approvals_by_tenant tenant \x00 expires_at ‖ key    → (open approvals only: GET /v1/approvals)
//	settled        settled_at ‖ tenant \x00 key         → (settled rows only: retention, retention.go)
//	compensations  tenant \x00 original \x00 key       → (open compensations only: retention keeps the original)
//	idempotency    scope \x00 key hash                  → ledger.IdempotencyRecord (Idempotency-Key)
//	idempotency_by_time at ‖ scope \x00 key hash        → (PruneIdempotency is O(pruned))
//	meta           schema_version                       → "2" (a version-1 file is upgraded on open)
//	               rows_<status>                        → count, 8-byte big-endian (moves in PutRow)
//	               rows_counted                         → "1" once a file has counts
//	               retention_indexed                    → "1" once settled and compensations are built
//	               write_probe                          → (only between /readyz's two probe commits; fault.go)
//
// PutRow moves a row's index entries whenever the indexed fields change;
// CheckConsistency verifies that they agree.
//
// # Group commit
//
// bbolt has one writer at a time and each commit costs two fdatasyncs
// (pages, then the meta page), so a commit per call would cap the store at
// a few hundred writes a second. Every write (Claim, Report, Apply, Ingest,
// Escalate, Reschedule, DecideApproval, AckEvents, PruneInbox, PutFreeze,
// DeleteFreeze, PutTool, DeleteTool, DeleteExpired) is instead an op — a closure over ledger.Tx that is
// deterministic and safe to run again — queued for one committer goroutine. The committer takes everything queued (up to
// Options.MaxGroup), runs the ops one after another in ONE db.Update and,
// as soon as that commit returns, delivers every answer and starts the next
// group with whatever queued meanwhile. There is no timer: bbolt's db.Batch
// waits up to MaxBatchDelay (10 ms) for a batch to fill, which a light load
// pays on every write; here a group closes when the previous fsync ends, so
// the group size follows the load. Before taking a group the committer
// yields (runtime.Gosched) while the queue is still growing, which lets the
// callers woken by the last commit enqueue again: at 64 callers a group
// carries about 45 ops instead of the 32 of two alternating half-groups.
//
// An op that fails after writing (a half-done flow) rolls the transaction
// back; it alone receives its error and the group runs again without it.
// An op that fails before writing anything (not found, a fingerprint
// mismatch, invalid input: the common case) leaves the transaction as it
// was, so the group goes on and its error is delivered with the others.
// Answers are delivered only after the commit returned, so an acknowledged
// write is on disk; if the commit fails, every op of the group gets
// ErrUnavailable. A group in which no op wrote anything (replayed claims,
// waits, not-found answers) is rolled back instead of committed: its
// answers read only durable state, and it costs no fdatasync.
//
// Stats reports the committer's counters (groups, ops, rollbacks, time in
// ops and in commits); BENCHMARKS.md at the repository root has the
// measured figures and what limits them.
//
// A caller's ctx is honoured while its op is queued: the op is withdrawn
// and ctx.Err() returned. Once the committer has taken the op, the caller
// waits for the durable answer (at most one commit), because the write may
// commit and a caller must never be told it did not.
//
// Reads (Get, List, Due, PendingEvents, ListFreezes, GetTool, ListTools,
// GetApproval, ListApprovals, CountRows, CheckConsistency, ExpiredRows,
// Backup) are bbolt read
// transactions on the last committed snapshot and never queue behind the
// committer. bbolt options: the map freelist and NoFreelistSync (the
// freelist is rebuilt on open instead of written on every commit), and a
// 1 GiB initial memory map so a growing file does not remap, which would
// wait for every open read transaction.
//
// # Concurrency
//
// Operating the file (docs/architecture.md §15): retention.go deletes
// expired rows, backup.go streams a copy from one read transaction,
// offline.go checks, restores and compacts a file no node holds, and
// fault.go keeps what the store knows of failing commits (a full disk).
//
// A Store is safe for concurrent use. Its one goroutine, the committer, is
// started by Open and stopped by Close, which first lets it commit every op
// queued before Close. Notify's channel (buffer 1) is signalled without
// blocking from tx.OnCommit of a commit that appended outbox records. After
// Close every method returns an error wrapping ledger.ErrUnavailable, as do
// bbolt I/O failures.
package bolt
