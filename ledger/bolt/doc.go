// Package bolt is the embedded ledger.Store: one bbolt file, one process.
// It implements ledger.Tx over a bbolt read-write transaction and embeds
// ledger.Flows, which runs the ledger's shared flows (claim, report, apply,
// ingest, escalate, reschedule, redrive) inside it, so the rules are
// ledger's, not ours.
//
// Imports: the standard library, ledger, go.etcd.io/bbolt,
// go-json-experiment/json (encoding/json's format on a faster engine;
// json.go) and tidwall/btree (the write-ahead log's in-memory layers) only.
//
// # Layout
//
// Every value is JSON but the row counts and the Idempotency-Key records
// (a compact binary form: they are written on the claim path); rows are
// versioned ({"v":1,"row":{…}}) and the meta bucket holds the schema
// version (Open refuses a newer one) and the row count of each status. Keys join
// validated printable-ASCII parts with \x00 and times as 8-byte big-endian
// Unix nanoseconds, so byte order is the order each index needs.
//
// Rows are keyed by sequence (schema 3, rowindex.go): an insert appends to
// the rows B+tree, whose pages are packed full, instead of dirtying a
// random leaf of a hash-ordered one. A row is found by tenant and key
// through local_ids for a minted key (its local id is its key's own
// prefix) and through keys for any other; every other index holds
// tenant \x00 key and resolves through those two:
//
//	rows_seq       be64(seq) (bucket.NextSequence)      → {"v":1,"row":…}
//	local_ids      metadata_local_id                    → be64(seq) ‖ tenant \x00 key
//	keys           key \x00 tenant                      → be64(seq) (joins on an echoed key; business keys only —
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
//	idempotency    scope \x00 key hash                  → ledger.IdempotencyRecord (Idempotency-Key; binary, not JSON)
//	idempotency_by_time at ‖ scope \x00 key hash        → (PruneIdempotency is O(pruned); a record written
//	                                                     again keeps its older entry until the prune)
//	journal        tenant \x00 key \x00 seq            → ledger.JournalEntry (the row journal, journal.go;
//	                                                     the newest 100 per row, deleted with the row;
//	                                                     seq 0 holds the row's entry count)
//	console_revoked session id                          → until (the console's sign-outs, journal.go)
//	meta           schema_version                       → "3" (an older file is migrated on open)
//	               migrating                            → "1" while a schema-2 file's rows are moved
//	               wal_index                            → the last log record bbolt holds, 8-byte big-endian
//	               rows_<status>                        → count, 8-byte big-endian (moves in PutRow)
//	               rows_counted                         → "1" once a file has counts
//	               retention_indexed                    → "1" once settled and compensations are built
//	               write_probe                          → (only between /readyz's two probe commits; fault.go)
//
// PutRow moves a row's index entries whenever the indexed fields change;
// CheckConsistency verifies that they agree, and that the row indexes and
// the rows are a bijection (each row found at its own sequence by its key
// and by its local id, no entry left over).
//
// A file of schema 2 (rows keyed tenant \x00 key in a bucket named rows;
// local_ids → tenant \x00 key; keys entries empty) is migrated by Open,
// after a log left by that build is replayed into the old layout (the
// log's records name buckets by their index in allBuckets: rows keeps
// index 0), in transactions of about 8 MiB of rows, each moving rows and
// deleting them from the old bucket (migrate.go). The first stamps
// version 3 and the migrating marker, so an older build refuses the file
// from then on; a kill between or inside them leaves every row in exactly
// one bucket, and the next Open resumes; the last deletes the old bucket
// and the marker. CheckFile counts the rows of both buckets and leaves
// the invariants to Open for such a file (TestCrashDuringMigration).
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
// Only what depends on the file's state runs there: Claim encodes the row
// an autonomous claim inserts in the caller's goroutine, in parallel with
// the other callers, and PutRow writes those bytes when the row it is
// given equals the one encoded (preencode.go; any other row is encoded in
// the committer). Likewise Ingest reads and decodes the row a delivery
// joins before queueing, and RowByLocalID uses that decoding only for the
// very bytes it finds (predecode.go). Checks that may refuse a write come before its first
// write, so a refused op never rolls its group back.
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
// GetApproval, ListApprovals, CountRows, CheckConsistency, ExpiredRows)
// are bbolt read transactions on the last committed snapshot (with the log,
// under its durable layers) and never queue behind the committer; Backup
// first has bbolt take every acknowledged write (Flush), then copies one
// bbolt read transaction. bbolt options: the map freelist and NoFreelistSync (the
// freelist is rebuilt on open instead of written on every commit), and a
// 1 GiB initial memory map so a growing file does not remap, which would
// wait for every open read transaction. bbolt is v1.4.3 with one local
// patch (third_party/bbolt/PATCHES.md): its freelist forgets which
// transaction allocated a page once no read transaction can need it, where
// upstream remembers it for every page allocated since open and not freed
// since — in this appending layout nearly every page, about 200 MB of
// memory at 10M rows.
//
// # Write-ahead log
//
// By default (Options.NoWAL off; `bolt_wal` in the service's config) a
// write-ahead log sits in front of the file, as etcd puts one in front of
// bbolt: a bbolt commit costs two fdatasyncs and a page write for every
// B+tree page the group dirtied (about 2 per claim at 1M rows since
// schema 3, 4.4 before), where the log costs one sequential write and one
// fdatasync per batch of groups.
//
//   - The committer runs a group's ops as above, but over a bbolt read
//     transaction under layers of writes bbolt does not hold yet (kv.go:
//     ordered maps per bucket, newest first, a tombstone per delete; a
//     merged cursor walks them with bbolt's cursor). The group's writes
//     collect in its own layer; an op that fails after writing discards
//     it and the group re-runs without that op, as before.
//   - The group's layer becomes one log record (every key's last write, the
//     bucket sequences), encoded by the syncer goroutine it is handed to,
//     and the committer starts the next group at once, on top of the
//     groups not yet durable. Within a group, a key looked up and found
//     nowhere is answered from memory when asked for again before the
//     group writes anything (a claim's key and local id: the flow looks,
//     then PutRow checks).
//     The syncer writes every record queued meanwhile, fdatasyncs once, and
//     only then answers their callers, in order; a group that wrote nothing
//     is answered with the records queued before it, so no answer ever
//     rests on a write that is not durable.
//   - Readers (view) see bbolt's last commit under the durable layers only:
//     a write is visible once it is acknowledged, never before. The layers
//     and the read transaction are taken together under one mutex, so the
//     flusher dropping a layer bbolt now holds is never half seen.
//   - The committer freezes the layer it adds groups to every
//     WALFlushInterval (200 ms) or WALFlushBytes (1 MiB), and the flusher
//     goroutine commits each frozen layer into bbolt in one transaction,
//     each bucket's keys in order, together with wal_index, the last record
//     it holds (etcd's consistent index); then it drops the layer and the
//     log segments whose records are all at or below wal_index. Past 8 MiB
//     waiting, the committer waits for the flusher (bounded memory: bbolt
//     holds a transaction's dirty pages in memory until it commits).
//   - The log (wallog.go) is a directory beside the file, reconciler.db.wal,
//     of segments named by their first record's index. Each record carries
//     its length, index and a CRC-32C. A segment is zero-filled and fsynced
//     before use (the next one in the background), so a record's fdatasync
//     writes data only, not a file size. Open replays the records after
//     wal_index into bbolt in one commit, cuts a torn tail (the last
//     segment's only), refuses a log damaged anywhere else, and starts an
//     empty log. Close flushes everything into bbolt and removes the log.
//
// Files from before the log open as they are (no wal_index: the log starts
// at 1). A store opened with NoWAL replays and removes a log it finds, so
// switching either way loses nothing; a build older than the log would
// ignore one left by a crash, so open the file with this build first.
// Store.Flush waits until bbolt holds every write acknowledged before it
// (a copy of the bbolt file taken then is complete). A batch never spans
// segments; when the next segment cannot be created (a full disk), nothing
// was written: that batch's groups and every group decided on top of them
// fail with ErrUnavailable, the committer starts again from durable state,
// and the log goes on once there is room. A failed write or fdatasync
// inside a segment fails every later write until restart (what reached the
// disk is unknown). A failed bbolt batch is logged and retried, the writes
// staying durable in the log; while it fails and more than 8 MiB wait, new
// groups fail with ErrUnavailable (503s) rather than wait. Both feed the
// write-health episode of fault.go (/readyz). Durability is tested by TestCrash/wal
// (SIGKILLs, also inside batch commits and between segment removals) and
// TestPowerLoss (a file layer that drops every byte not fsynced).
//
// # Concurrency
//
// Operating the file (docs/architecture.md §15): retention.go deletes
// expired rows, backup.go streams a copy from one read transaction (after
// Flush: with the log, the copy holds every write acknowledged before the
// backup began, and its wal_index), offline.go checks, restores and
// compacts a file no node holds (restore removes the replaced file's log:
// its records belong to the old file; check and compact replay a log left
// by a crash first), and fault.go keeps what the store knows of failing
// commits (a full disk).
//
// A Store is safe for concurrent use. Its goroutines — the committer, and
// with the log the syncer and the flusher (and the zero-filling of the next
// segment) — are started by Open and stopped by Close, which first lets the
// committer commit every op queued before Close. Notify's channel (buffer 1) is signalled without
// blocking from tx.OnCommit of a commit that appended outbox records. After
// Close every method returns an error wrapping ledger.ErrUnavailable, as do
// bbolt I/O failures.
package bolt
