package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentledger/reconciler/ledger"
)

// querier is what a pgTx runs statements on: a pgx.Tx for writes, the pool
// for reads (each read statement sees the latest committed data).
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Namespaces of the two-int4 transaction-scoped advisory locks. The second
// int is the FNV-1a hash of the locked name; a hash collision only serialises
// two unrelated transactions, it never lets two related ones overlap.
const (
	lockRow     = 0x52454301 // tenant \x00 key: claims of one key queue here
	lockLocalID = 0x52454302 // metadata_local_id: a claim and a webhook for it
	lockInbox   = 0x52454303 // vendor \x00 event id: one delivery at a time
	lockRelay   = 0x52454304 // one ClaimEvents pass at a time
)

// pgTx implements ledger.Tx over one READ COMMITTED transaction.
//
// In a write transaction every read that a write may follow locks what it
// read, so the flow's decision still holds at COMMIT:
//   - GetRow takes an advisory lock on tenant+key, then SELECT … FOR UPDATE.
//     The advisory lock covers a key with no row yet: concurrent claims of a
//     new key queue on it, and each later one, once the first commits, reads
//     the row the first inserted (READ COMMITTED gives every statement a new
//     snapshot).
//   - RowByLocalID takes an advisory lock on the local id, which a claim
//     that inserts the row also takes (the claim flow looks the local id up
//     before the insert), so a webhook either sees the new row or parks an
//     orphan the claim then sees — never neither.
//   - GetInbox takes an advisory lock on the vendor event id, so a duplicate
//     delivery waits for the first and answers duplicate.
//
// An insert that still meets a row (a race the locks do not cover) fails
// with errRace, which re-runs the whole transaction.
type pgTx struct {
	ctx      context.Context
	q        querier
	write    bool
	appended bool
	// atCommit are writes whose answer the flow does not read (outbox
	// records and their NOTIFY, inbox records, Idempotency-Key records),
	// sent with the COMMIT in its round trip.
	atCommit []queued
	// pre, set by Store.Ingest, holds the delivery's reads, pipelined
	// (ingest.go).
	pre *prefetch
}

// queued is one statement of atCommit.
type queued struct {
	sql  string
	args []any
	// refused, when set, names the flow's error for the statement's
	// ERROR (nil: the database error stands).
	refused func(*pgconn.PgError) error
}

// refusedError is a queued statement's ERROR that is the flow's answer
// (refused): the transaction is rolled back and err returned as it is.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }

// atCommitOrExec queues a write that nothing later in the flow reads to
// go with the COMMIT (atCommit) in a write transaction, and runs it at
// once otherwise; what names it in an error.
func (t *pgTx) atCommitOrExec(what, sql string, args ...any) error {
	if t.write {
		t.atCommit = append(t.atCommit, queued{sql: sql, args: args})
		return nil
	}
	if _, err := t.q.Exec(t.ctx, sql, args...); err != nil {
		return dbErr(what, err)
	}
	return nil
}
func (e *refusedError) Unwrap() error { return e.err }

// result turns a queued statement's failure into the error to return.
func (q queued) result(op string, err error) error {
	var pgErr *pgconn.PgError
	if q.refused != nil && errors.As(err, &pgErr) {
		if ferr := q.refused(pgErr); ferr != nil {
			return &refusedError{ferr}
		}
	}
	return dbErr(op, err)
}

// flush sends the statements queued for the COMMIT now, in one round trip:
// a read after them must see them (a flow that writes a row and then reads
// on). The flows read first and write after, so it seldom sends anything.
func (t *pgTx) flush() error {
	if !t.write || len(t.atCommit) == 0 {
		return nil
	}
	qs := t.atCommit
	t.atCommit = nil
	b := &pgx.Batch{}
	for _, q := range qs {
		b.Queue(q.sql, q.args...)
	}
	br := t.q.SendBatch(t.ctx, b)
	var err error
	for _, q := range qs {
		if _, e := br.Exec(); e != nil {
			err = q.result("flush", e)
			break
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = dbErr("flush", cerr)
	}
	var re *refusedError
	if errors.As(err, &re) {
		return re.err
	}
	return err
}

var _ ledger.Tx = (*pgTx)(nil)

// pairName is the name of a lock on a pair (tenant and key, vendor and
// event id, scope and Idempotency-Key hash): every flow that takes the lock
// must spell it alike, the one-statement claim's included, or two of them
// would not exclude each other.
func pairName(a, b string) string { return a + "\x00" + b }

// queueLock queues the transaction-scoped advisory lock on name in
// namespace ns (one of the lock* constants) into b.
func queueLock(b *pgx.Batch, ns int32, name string) {
	b.Queue(`SELECT pg_advisory_xact_lock($1, $2)`, ns, lockID(name))
}

func lockID(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int32(h.Sum32())
}

// lockedRow reads one row document after taking an advisory lock, in one
// round trip: the two statements are pipelined, and the server runs the
// SELECT (with a snapshot of its own, READ COMMITTED) only once the lock is
// granted, so it sees whatever the previous holder committed.
func (t *pgTx) lockedRow(op string, ns int32, name, sql string, args ...any) (ledger.Row, error) {
	if !t.write {
		return t.oneRow(op, sql, args...)
	}
	if err := t.flush(); err != nil {
		return ledger.Row{}, err
	}
	b := &pgx.Batch{}
	queueLock(b, ns, name)
	b.Queue(sql+" FOR UPDATE", args...)
	br := t.q.SendBatch(t.ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return ledger.Row{}, dbErr("advisory lock", err)
	}
	var doc []byte
	err := br.QueryRow().Scan(&doc)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Row{}, ledger.ErrNotFound
	}
	if err != nil {
		return ledger.Row{}, dbErr(op, err)
	}
	return decodeRow(doc)
}

// execAsync runs sql in the transaction after SET LOCAL synchronous_commit
// = off, the two in one round trip (with the transaction's BEGIN): its
// COMMIT then returns before the WAL flush. Only for the relay's
// bookkeeping — leases, holds, deletes of published records — which a
// crash may lose at the cost of one more publish of a record, and
// JetStream's Nats-Msg-Id dedupe drops that. A relay woken by a commit
// then waits for no flush of its own before it publishes, and its writes
// take no place in the claims' and webhooks' group commits.
func (t *pgTx) execAsync(op, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(`SET LOCAL synchronous_commit = off`)
	b.Queue(sql, args...)
	br := t.q.SendBatch(t.ctx, b)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return dbErr(op, err)
	}
	return nil
}

// rowDoc is the stored form of a row; v lets the format change.
type rowDoc struct {
	V   int        `json:"v"`
	Row ledger.Row `json:"row"`
}

const rowDocVersion = 1

func encodeRow(r ledger.Row) (string, error) {
	// json.Marshal(rowDoc{…})'s bytes, the row written by hand (it is on
	// every claim's path; TestEncodeRowAsRowDoc).
	b := make([]byte, 0, 1024)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, rowDocVersion, 10)
	b = append(b, `,"row":`...)
	b, err := ledger.AppendRowJSON(b, &r)
	if err != nil {
		return "", fmt.Errorf("encode row: %w", err)
	}
	return string(append(b, '}')), nil
}

func decodeRow(b []byte) (ledger.Row, error) {
	var d rowDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return ledger.Row{}, fmt.Errorf("decode row: %w", err)
	}
	if d.V != rowDocVersion {
		return ledger.Row{}, fmt.Errorf("decode row: version %d, this build reads %d", d.V, rowDocVersion)
	}
	return d.Row, nil
}

// micros truncates t to the microsecond, as pgx does when it sends a
// timestamptz, so a value compared in Go equals the stored one.
func micros(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// nullTime is NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	m := micros(t)
	return &m
}

func (t *pgTx) oneRow(op, sql string, args ...any) (ledger.Row, error) {
	var doc []byte
	err := t.q.QueryRow(t.ctx, sql, args...).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Row{}, ledger.ErrNotFound
	}
	if err != nil {
		return ledger.Row{}, dbErr(op, err)
	}
	return decodeRow(doc)
}

// GetRow implements ledger.Tx.
func (t *pgTx) GetRow(tenant, key string) (ledger.Row, error) {
	return t.lockedRow("get row", lockRow, pairName(tenant, key), `SELECT doc FROM rows WHERE tenant = $1 AND key = $2`, tenant, key)
}

// RowByApproval implements ledger.Tx: the approval id names the row, which
// is then read as GetRow reads it (locked), so a decision and a claim of
// the same row serialise.
func (t *pgTx) RowByApproval(id string) (ledger.Row, error) {
	if err := t.flush(); err != nil {
		return ledger.Row{}, err
	}
	var tenant, key string
	err := t.q.QueryRow(t.ctx, `SELECT tenant, key FROM rows WHERE approval_id = $1`, id).Scan(&tenant, &key)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Row{}, ledger.ErrApprovalNotFound
	}
	if err != nil {
		return ledger.Row{}, dbErr("row by approval", err)
	}
	row, err := t.GetRow(tenant, key)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.Row{}, ledger.ErrApprovalNotFound // deleted since
	}
	return row, err
}

// RowByLocalID implements ledger.Tx.
func (t *pgTx) RowByLocalID(localID string) (ledger.Row, error) {
	if row, ok, err := t.prefetchedRow(localID); ok {
		return row, err
	}
	return t.lockedRow("row by local id", lockLocalID, localID, `SELECT doc FROM rows WHERE metadata_local_id = $1`, localID)
}

// TenantsOfKey implements ledger.Tx; the tenants come sorted (by bytes).
func (t *pgTx) TenantsOfKey(key string) ([]string, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	rows, err := t.q.Query(t.ctx, `SELECT tenant FROM rows WHERE key = $1 ORDER BY tenant`, key)
	if err != nil {
		return nil, dbErr("tenants of key", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbErr("tenants of key", err)
	}
	return tenants, nil
}

// errConflict reports a PutRow whose old row does not match what is stored:
// a flow bug, since the row is locked by the read that produced old.
var errConflict = errors.New("row changed under the transaction")

// PutRow implements ledger.Tx: one INSERT or UPDATE writes the document and
// the indexed columns together, so the indexes cannot drift from the row.
func (t *pgTx) PutRow(old *ledger.Row, row ledger.Row) error {
	if !row.Status.Valid() {
		return fmt.Errorf("put row: %w: %q", ledger.ErrInvalidStatus, row.Status)
	}
	if row.MetadataLocalID == "" {
		return errors.New("put row: empty metadata_local_id")
	}
	if old != nil && (old.Tenant != row.Tenant || old.Key != row.Key) {
		return fmt.Errorf("put row: tenant or key changed: %w", errConflict)
	}
	args, err := rowArgs(row)
	if err != nil {
		return err
	}
	if old == nil {
		tag, err := t.q.Exec(t.ctx, `INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc,
				approval_id, approval_expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10) ON CONFLICT DO NOTHING`, args...)
		if err != nil {
			return dbErr("insert row", err)
		}
		if tag.RowsAffected() == 0 {
			// Someone committed the key or the local id after this
			// transaction looked: re-run, and the flow sees their row.
			return fmt.Errorf("insert row %s: %w", row.Key, errRace)
		}
		return nil
	}
	// The update goes with the COMMIT (atCommit): the row is locked by the
	// read that produced old, and a later read in the transaction flushes
	// it first. It divides by the rows it updated, so an update that finds
	// no row fails, and the COMMIT queued after it never runs.
	t.atCommit = append(t.atCommit, queued{sql: updateRowSQL, args: args, refused: updateRefused})
	return nil
}

const updateRowSQL = `WITH u AS (UPDATE rows SET metadata_local_id = $3, status = $4, run_id = $5,
		first_seen_at = $6, next_check_at = $7, doc = $8::jsonb, approval_id = $9, approval_expires_at = $10
	WHERE tenant = $1 AND key = $2 RETURNING 1)
	SELECT 1 / (SELECT count(*)::int FROM u)`

// updateRefused names the flow's error for an update the server refused.
func updateRefused(e *pgconn.PgError) error {
	switch e.Code {
	case "23505": // unique_violation: the local id or approval id is another row's
		return fmt.Errorf("put row: %w: local id in use", ledger.ErrFingerprintMismatch)
	case "22012": // division_by_zero: no row to update
		return fmt.Errorf("put row: update of a missing row: %w", errConflict)
	}
	return nil
}

// AppendOutbox implements ledger.Tx. In a write transaction the record
// goes with the COMMIT, in its round trip (atCommit): nothing in a flow
// reads the outbox, and the row's lock, held until the COMMIT, still
// orders a row's records. The transaction sends no NOTIFY itself: the
// store wakes the relays after the commit (Store.wake).
func (t *pgTx) AppendOutbox(e ledger.Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("append outbox: %w", err)
	}
	const insert = `INSERT INTO outbox (tenant, key, event) VALUES ($1, $2, $3::jsonb)`
	if t.write {
		t.appended = true // the store wakes the relays after the COMMIT
	}
	return t.atCommitOrExec("append outbox", insert, e.Tenant, e.Key, string(b))
}

// GetInbox implements ledger.Tx: in a write transaction the event id's
// advisory lock and the read go in one round trip, as lockedRow's do.
func (t *pgTx) GetInbox(vendor, eventID string) (ledger.InboxRecord, error) {
	const q = `SELECT first_seen, result FROM inbox WHERE vendor = $1 AND event_id = $2`
	var (
		rec    ledger.InboxRecord
		result string
		err    error
	)
	if rec, ok, err := t.prefetchedInbox(vendor, eventID); ok {
		return rec, err
	}
	if err := t.flush(); err != nil {
		return ledger.InboxRecord{}, err
	}
	if t.write {
		b := &pgx.Batch{}
		queueLock(b, lockInbox, pairName(vendor, eventID))
		b.Queue(q, vendor, eventID)
		br := t.q.SendBatch(t.ctx, b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return ledger.InboxRecord{}, dbErr("advisory lock", err)
		}
		err = br.QueryRow().Scan(&rec.FirstSeen, &result)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	} else {
		err = t.q.QueryRow(t.ctx, q, vendor, eventID).Scan(&rec.FirstSeen, &result)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.InboxRecord{}, ledger.ErrNotFound
	}
	if err != nil {
		return ledger.InboxRecord{}, dbErr("get inbox", err)
	}
	rec.FirstSeen = rec.FirstSeen.UTC()
	rec.Result = ledger.IngestOutcome(result)
	return rec, nil
}

// PutInbox implements ledger.Tx; a record for a known event id replaces it
// (a parked orphan's "orphan" becomes "accepted" when a claim applies it).
// In a write transaction it goes with the COMMIT (atCommit): the event
// id's lock, taken by GetInbox, is held until then.
func (t *pgTx) PutInbox(vendor, eventID string, rec ledger.InboxRecord) error {
	const upsert = `INSERT INTO inbox (vendor, event_id, first_seen, result) VALUES ($1, $2, $3, $4)
		ON CONFLICT (vendor, event_id) DO UPDATE SET first_seen = EXCLUDED.first_seen, result = EXCLUDED.result`
	return t.atCommitOrExec("put inbox", upsert, vendor, eventID, micros(rec.FirstSeen), string(rec.Result))
}

// Orphans implements ledger.Tx: oldest first (by the delivery's time, then
// by parking order).
func (t *pgTx) Orphans(localID string) ([]ledger.Delivery, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	rows, err := t.q.Query(t.ctx, `SELECT delivery FROM orphans WHERE local_id = $1 ORDER BY at, parked`, localID)
	if err != nil {
		return nil, dbErr("orphans", err)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, dbErr("orphans", err)
	}
	out := make([]ledger.Delivery, 0, len(docs))
	for _, b := range docs {
		var d ledger.Delivery
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("decode orphan: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// PutOrphan implements ledger.Tx; a redelivery of the same event replaces
// itself, as in bolt.
func (t *pgTx) PutOrphan(d ledger.Delivery) error {
	if d.LocalID == "" {
		return errors.New("put orphan: no local id")
	}
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("put orphan: %w", err)
	}
	const upsert = `INSERT INTO orphans (local_id, vendor, event_id, at, delivery) VALUES ($1, $2, $3, $4, $5::jsonb)
		ON CONFLICT (local_id, vendor, event_id) DO UPDATE SET at = EXCLUDED.at, delivery = EXCLUDED.delivery`
	// With the COMMIT in a write transaction: the flow reads nothing after
	// parking an orphan but what a read's flush brings in front of it.
	return t.atCommitOrExec("put orphan", upsert, d.LocalID, d.Vendor, d.EventID, micros(d.At), string(b))
}

// DeleteOrphans implements ledger.Tx.
func (t *pgTx) DeleteOrphans(localID string) error {
	// In a write transaction with the COMMIT, after the orphans queued
	// before it (PutOrphan).
	return t.atCommitOrExec("delete orphans", `DELETE FROM orphans WHERE local_id = $1`, localID)
}

// OrphanLocalIDs implements ledger.Tx, in byte order (COLLATE "C", as the
// other stores sort) whatever the database's collation. It takes no lock:
// the redrive flow locks each local id through RowByLocalID before it reads
// the deliveries again.
func (t *pgTx) OrphanLocalIDs(after string, limit int) ([]string, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	rows, err := t.q.Query(t.ctx, `SELECT DISTINCT local_id COLLATE "C" AS lid FROM orphans
		WHERE local_id COLLATE "C" > $1 ORDER BY lid LIMIT $2`, after, limit)
	if err != nil {
		return nil, dbErr("orphan local ids", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbErr("orphan local ids", err)
	}
	return ids, nil
}
