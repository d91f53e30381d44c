// Package postgres is the ledger.Store for many replicas sharing one
// PostgreSQL database, on pgx (pgxpool). It implements ledger.Tx over one
// pgx transaction and embeds ledger.Flows, which runs the ledger's shared
// flows (claim, report, apply, ingest, escalate, reschedule, redrive)
// inside it, so the rules are ledger's, not ours; it passes ledger/storetest.
//
// Imports: the standard library, ledger, github.com/jackc/pgx/v5 and
// github.com/cenkalti/backoff/v4.
//
// # Schema
//
// Migrations are embedded (migrations/NNNN_name.sql) and applied by Open in
// one transaction under pg_advisory_xact_lock, so replicas that start
// together apply them once; schema_migrations records the versions, and a
// database of a newer version than this build is refused (ErrSchemaTooNew)
// without a write. Tables live in the first schema of the search_path
// (a search_path parameter in the URL selects it):
//
//	rows     (tenant, key) PK; doc jsonb {"v":1,"row":…} plus copies of the
//	         indexed fields: metadata_local_id UNIQUE, status, run_id,
//	         first_seen_at, next_check_at. Indexes: key (joins on an echoed
//	         key), (next_check_at, tenant, key) WHERE status IN
//	         ('pending','unknown') (due rows), (tenant, first_seen_at DESC,
//	         key DESC) (List); approval_id (UNIQUE where set: a partial
//	         index, migration 0010) and approval_expires_at
//	         (set while the approval is open) with partial indexes
//	         (approval_expires_at, tenant, key) (the expiry job) and
//	         (tenant, approval_expires_at, key) (GET /v1/approvals).
//	outbox   seq bigserial PK, tenant, key, event jsonb, created,
//	         lease_until (ClaimEvents), held (HoldEvents); index (tenant,
//	         key, seq).
//	inbox    (vendor, event_id) PK, first_seen, result; index first_seen.
//	orphans  (local_id, vendor, event_id) PK, at, delivery jsonb, parked
//	         bigserial (oldest first: at, then parking order).
//	freezes  (tenant, target) PK, actor, note, at: the kill switch.
//	tools    (tenant, name) PK, version, doc jsonb {"v":1,"tool":…}: the
//	         tool registry.
//
// Timestamps are timestamptz (microseconds); the row document keeps every
// time exactly, the columns hold them truncated to the microsecond.
//
// # Transactions and retries
//
// A claim of a new key, the common case, is one round trip (fastclaim.go):
// the ledger's claim flow runs against a speculative Tx (specTx) that
// answers every read "nothing there" and records the writes, which then go
// as one call of a server function (recon_claim_new, migration 0009) in an
// implicit transaction, each guarded by what makes "nothing there" true at
// commit — the row's INSERT … ON CONFLICT DO NOTHING (primary key, local
// id, approval id), the Idempotency-Key record's plain INSERT (a unique
// violation aborts the transaction), and an orphan check made once the
// local id's advisory lock is granted, taken after the record's and the
// key's (the locked flow's locks, in its order, so a locked flow that read
// them as missing keeps its answer to its COMMIT). Outbox records and the
// commit marker are inserted only once the row is in. A conflict, or a
// flow that reads or writes anything else, runs the locked transaction
// below, where the flow decides on what it reads.
//
// Every other write is one READ COMMITTED transaction, whose BEGIN goes
// out with its first batch (lazyBegin) and whose row updates, outbox,
// inbox and Idempotency-Key records go with its COMMIT (atCommit; a read
// later in the transaction flushes them first, and an update that finds
// no row or another row's local id fails its statement, so the COMMIT
// queued after it never runs). Reads a write depends on
// take locks (see pgTx): GetRow an advisory lock on tenant+key and SELECT …
// FOR UPDATE, so concurrent claims of one key serialise and every one after
// the first reads the row the first inserted; RowByLocalID an advisory lock
// on the local id, which a claim inserting the row also takes, so a webhook
// racing a claim either joins the new row or parks an orphan the claim then
// applies; GetInbox an advisory lock on the vendor event id, so a duplicate
// delivery waits and answers duplicate. Inserts are INSERT … ON CONFLICT DO
// NOTHING; one that inserts nothing lost a race and re-runs the transaction.
//
// A webhook's Ingest knows its reads before the flow runs (the event id's
// inbox record, the replay token's, the row under the local id), so it
// sends them — each lock, then its read — as one pipeline with the BEGIN
// on the flow's first read, in the flow's lock order, and answers the
// flow's reads from it (ingest.go); orphans and journal notes go with the
// COMMIT. A known row's delivery, a duplicate and an orphan are two round
// trips.
//
// A transaction is re-run, with capped exponential backoff and jitter
// (Options.RetryTimeout, default 10 s), after a serialization failure or
// deadlock (40001, 40P01), a lost insert race, or a connection that failed
// or was terminated (pg_terminate_backend: 57P01) before COMMIT. The flows
// are deterministic functions of what they read, so a re-run is the same
// operation on fresher data. A COMMIT is different: it counts as failed
// only when that is proven — never sent, or answered with an ERROR (not a
// FATAL). Otherwise (a dropped connection, an immediate shutdown's 57P01
// after a flushed commit record) the store reads the outcome back from
// the commit marker the transaction wrote with its COMMIT (commit_markers,
// settleCommit): committed, the first run's answer stands; not committed,
// the flow runs again. Re-running a claim that did commit would answer
// wait to its own caller. When the outcome cannot be read back within
// RetryTimeout the call fails with an error wrapping ledger.ErrUnavailable
// (errCommitUnknown), never a blind re-run; the caller's resend, with its
// Idempotency-Key, gets the first send's answer.
//
// The one-statement claim's answer, when lost, is settled the same way:
// its call inserts the marker once the row is in (plainly, so a read-back
// that took the marker first aborts it).
//
// The Idempotency-Key records (ledger.IdempotencyTx) are the idempotency
// table, locked per key with an advisory lock as rows are;
// PruneIdempotency deletes them, and the commit markers older than ten
// minutes (found through a BRIN index on their time; a marker's id begins
// with its time, so its primary key grows at one end).
//
// The row journal (ledger.JournalTx) is the row_journal table of
// migration 0008: an append inserts the entry and deletes the row's entries
// past ledger.MaxJournalPerRow in one statement, under the row's lock the
// flow already holds; DeleteExpired deletes a row's entries with the row.
// FindRows is one query (the local id's unique index, or a WHERE on the
// row document over the tenant's rows: no index for it on the write path);
// the console's sign-outs are console_revocations.
//
// Errors: a missing row is ledger.ErrNotFound; every database or connection
// failure wraps ledger.ErrUnavailable; after Close every method returns
// ErrUnavailable.
//
// # Sharing work between replicas
//
// Due, PendingEvents and EventsAfter are plain reads: every replica sees
// the same rows and records (the storetest contract). Replicas that share the work use:
//
//   - ClaimDue(ctx, now, limit, lease): in one transaction, SELECT … FOR
//     UPDATE SKIP LOCKED the earliest due open rows and move their
//     next_check_at to now+lease. Guarantee: within a lease no two callers
//     get the same row; a row whose resolver died comes back when the lease
//     ends.
//   - ClaimEvents(ctx, now, limit, lease): one pass at a time (a
//     transaction-scoped advisory lock) leases, in sequence order, the
//     records that are not leased and have no earlier record of the same
//     row (tenant, key) under a live lease. Guarantee: while relays publish
//     and ack within their lease, no record is handed to two relays at once
//     and each row's records are handed out — and so published — in commit
//     order; an unacked record is handed out again after its lease (the
//     Nats-Msg-Id dedupe absorbs the second publish). Records of different
//     rows carry no order between them.
//   - HoldEvents(ctx, until, seqs): a relay that keeps published records
//     until the stream has synced them marks them held until then. A held
//     record is not handed out before its hold ends and keeps no later
//     record of its row waiting; after the hold (the relay died before
//     AckEvents) it is handed out again. CountEvents leaves held records
//     out: it counts what no relay has published.
//
// Leases compare times from the callers' injected clocks, so replica
// clocks must agree to well within a lease.
//
// ClaimEvents, HoldEvents and AckEvents commit with synchronous_commit off
// (execAsync): a crash may lose a lease, a hold or a delete, which costs
// one more publish of a record that JetStream's Nats-Msg-Id dedupe drops,
// and in exchange a woken relay waits for no WAL flush before publishing.
//
// Outbox sequence numbers come from a sequence at insert time, so across
// rows a lower seq can commit after a higher one; within a row they are in
// commit order, because the row lock serialises the row's transactions.
//
// # Notify
//
// After a commit that appended outbox records the store signals its own
// relay and rings the notifier, a goroutine that runs pg_notify on the
// schema's channel in a transaction of its own, one at a time (rings that
// come meanwhile coalesce), so every replica's relay wakes. The write
// transactions send no NOTIFY themselves: PostgreSQL serialises the
// commits of notifying transactions, WAL flush included, behind one
// database-wide lock, which would end group commit.
//
// Each Store keeps one dedicated LISTEN connection (not a pool connection:
// LISTEN belongs to a session; Options.ListenURL points it elsewhere than
// the pool, at a session, when the pool goes through a transaction-mode
// pooler) in a goroutine started by Open and stopped
// by Close; it reconnects with backoff when the connection drops and then
// signals once, since a notification sent meanwhile is lost. Signals are
// coalesced into a channel of buffer 1.
//
// # Concurrency
//
// A Store is safe for concurrent use; each call borrows a pool connection
// for one transaction. The listener and the notifier are the goroutines
// the Store owns.
package postgres
