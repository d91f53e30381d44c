package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// A claim of a new key is the common case, and it needs no locked read:
// what the flow would read is "nothing" (no row under the key, none under
// its local id, no parked orphan, no Idempotency-Key record), and the
// writes that follow (the row, its outbox records, the key's record) are
// known before anything is read. So Claim first runs the ledger's own claim
// flow against a speculative Tx (specTx) that answers every read with
// "nothing" and records the writes, then sends those writes in one round
// trip, each guarded by what makes the "nothing" true at commit:
//
//   - no row under the key or the local id: the row's INSERT … ON CONFLICT
//     DO NOTHING inserts, or meets a committed (or waits for an in-flight)
//     row under the primary key, the local id or the approval id and
//     inserts nothing; and the key's advisory lock, taken first, waits for
//     a locked flow that read the key as missing;
//   - no Idempotency-Key record: the record's plain INSERT, whose unique
//     violation aborts the statement, after the record's advisory lock;
//   - no parked orphan: NOT EXISTS under the local id's advisory lock,
//     taken by an earlier statement of the same pipeline (so the check's
//     snapshot is taken after the lock is granted), the lock a webhook's
//     RowByLocalID takes before it reads the row and parks an orphan — so a
//     webhook racing the claim either joins the new row or parks an orphan
//     the claim sees.
//
// Every write after the row's reads the row's INSERT … RETURNING, so the
// statement writes all or nothing. (Its outbox records wake the relays
// after the commit, as every transaction's do: Store.wake.) The pipeline (lock, statement) runs in
// one implicit transaction. Anything else — the row (or a record) was
// there, the flow read or wrote something the speculation does not cover,
// the flow failed — runs the ordinary locked transaction (Store.run), where
// the flow decides on what it reads: only a conflict pays for the locks.
//
// The statement also inserts the transaction's commit marker (plainly, from
// the row's RETURNING), so a statement whose answer was lost is settled as
// a COMMIT's is (settleCommit): committed, the speculative answer stands;
// not, the claim runs again as a locked transaction.

// errNotFast ends a speculation the one statement cannot cover.
var errNotFast = errors.New("not a new key")

// fastKey marks a context whose Update may try the one-statement insert.
type fastKey struct{}

// Claim implements ledger.Store: the ledger's claim flow, a new key in one
// round trip (see above).
func (s *Store) Claim(ctx context.Context, c ledger.Claim) (ledger.ClaimResult, error) {
	return s.Flows.Claim(context.WithValue(ctx, fastKey{}, true), c)
}

// update is the Updater behind Flows: the one-statement insert when ctx
// allows it and the flow fits, else a locked transaction.
func (s *Store) update(ctx context.Context, fn func(ledger.Tx) error) error {
	if fast, _ := ctx.Value(fastKey{}).(bool); fast {
		done, err := s.tryInsert(ctx, fn)
		if done {
			return err
		}
	}
	if d, ok := ctx.Value(ingestKey{}).(*ledger.Delivery); ok {
		return s.run(ctx, true, func(tx *pgTx) error {
			tx.pre = newPrefetch(*d)
			return fn(tx)
		})
	}
	return s.run(ctx, true, func(tx *pgTx) error { return fn(tx) })
}

// specTx runs a flow on the assumption that nothing it reads exists, and
// records what it writes. Any read or write the one statement cannot
// guarantee ends the speculation (errNotFast).
type specTx struct {
	absentRows   [][2]string // tenant, key read as missing
	absentLocal  []string    // local ids read as missing
	noOrphans    []string    // local ids read as having no orphans
	absentRecord [][2]string // Idempotency-Key records (scope, hash) read as missing
	row          *ledger.Row // the one insert
	events       []ledger.Event
	records      []specRecord
}

type specRecord struct {
	scope, hash string
	rec         ledger.IdempotencyRecord
}

var (
	_ ledger.Tx            = (*specTx)(nil)
	_ ledger.IdempotencyTx = (*specTx)(nil)
	_ ledger.JournalTx     = (*specTx)(nil)
)

func (t *specTx) GetRow(tenant, key string) (ledger.Row, error) {
	t.absentRows = append(t.absentRows, [2]string{tenant, key})
	return ledger.Row{}, ledger.ErrNotFound
}

func (t *specTx) RowByLocalID(localID string) (ledger.Row, error) {
	t.absentLocal = append(t.absentLocal, localID)
	return ledger.Row{}, ledger.ErrNotFound
}

func (t *specTx) Orphans(localID string) ([]ledger.Delivery, error) {
	t.noOrphans = append(t.noOrphans, localID)
	return nil, nil
}

func (t *specTx) PutRow(old *ledger.Row, row ledger.Row) error {
	if old != nil || t.row != nil {
		return errNotFast
	}
	r := row.Clone()
	t.row = &r
	return nil
}

func (t *specTx) AppendOutbox(e ledger.Event) error {
	t.events = append(t.events, e)
	return nil
}

func (t *specTx) GetIdempotency(scope, keyHash string) (ledger.IdempotencyRecord, error) {
	t.absentRecord = append(t.absentRecord, [2]string{scope, keyHash})
	return ledger.IdempotencyRecord{}, ledger.ErrNotFound
}

func (t *specTx) PutIdempotency(scope, keyHash string, rec ledger.IdempotencyRecord) error {
	t.records = append(t.records, specRecord{scope, keyHash, rec})
	return nil
}

func (t *specTx) TenantsOfKey(string) ([]string, error) { return nil, errNotFast }
func (t *specTx) GetInbox(string, string) (ledger.InboxRecord, error) {
	return ledger.InboxRecord{}, errNotFast
}
func (t *specTx) PutInbox(string, string, ledger.InboxRecord) error { return errNotFast }
func (t *specTx) PutOrphan(ledger.Delivery) error                   { return errNotFast }
func (t *specTx) DeleteOrphans(string) error                        { return errNotFast }
func (t *specTx) OrphanLocalIDs(string, int) ([]string, error)      { return nil, errNotFast }
func (t *specTx) RowByApproval(string) (ledger.Row, error)          { return ledger.Row{}, errNotFast }

// AppendJournal ends the speculation: a flow that journals takes the
// locked path (the statement has no journal insert; a Tx without
// JournalTx would drop the entry silently).
func (t *specTx) AppendJournal(ledger.JournalEntry) error { return errNotFast }

// covered reports whether the one statement guarantees every read the flow
// made: the only insert is a row, every missing row or local id is that
// row's, every missing record is one the statement inserts.
func (t *specTx) covered() bool {
	if t.row == nil || !t.row.Status.Valid() || t.row.MetadataLocalID == "" {
		return false
	}
	for _, k := range t.absentRows {
		if k[0] != t.row.Tenant || k[1] != t.row.Key {
			return false
		}
	}
	for _, l := range append(t.absentLocal, t.noOrphans...) {
		if l != t.row.MetadataLocalID {
			return false
		}
	}
	for _, k := range t.absentRecord {
		n := 0
		for _, r := range t.records {
			if r.scope == k[0] && r.hash == k[1] {
				n++
			}
		}
		if n != 1 {
			return false
		}
	}
	return len(t.records) == len(t.absentRecord)
}

// tryInsert runs fn speculatively and, when it is a covered insert, sends
// it as one statement. done false: run fn as a locked transaction (nothing
// of the attempt committed). done true: err is the answer (nil: committed).
func (s *Store) tryInsert(ctx context.Context, fn func(ledger.Tx) error) (done bool, err error) {
	if s.closed.Load() {
		return true, errClosed
	}
	spec := &specTx{}
	if err := fn(spec); err != nil || !spec.covered() {
		return false, nil
	}
	marker := newMarker()
	sql, args, err := spec.statement(marker)
	if err != nil {
		return false, nil //nolint:nilerr // an encoding failure: the locked path reports it
	}
	// The locks the locked flow takes for the same reads, in its order
	// (Idempotency-Key record, key, local id): a locked flow that read one
	// of them as missing decides on that until its COMMIT, so this insert
	// waits for it. (Without the key's lock the insert committed in
	// between, and the locked flow's local-id check then met this row and
	// answered "local id in use" to a claim of the same key; without the
	// record's, its upsert overwrote this record. The porcupine check
	// caught the first.)
	// One statement takes them all (a target list is evaluated in order),
	// before the statement whose snapshot must follow them.
	var locks lockList
	for _, k := range spec.absentRecord {
		locks.add(lockIdempotency, k[0]+"\x00"+k[1])
	}
	locks.add(lockRow, spec.row.Tenant+"\x00"+spec.row.Key)
	if len(spec.noOrphans) > 0 {
		locks.add(lockLocalID, spec.row.MetadataLocalID)
	}
	b := &pgx.Batch{}
	b.Queue(locks.sql.String(), locks.args...)
	b.Queue(sql, args...)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, nil //nolint:nilerr // nothing was sent: the locked path retries and reports
	}
	defer conn.Release()
	var inserted bool
	br := conn.Conn().SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&inserted)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil && !inserted:
		// Someone's row (or orphan) was there: nothing was written.
		s.fastMisses.Add(1)
		return false, nil
	case err == nil:
	case commitRefused(err):
		// The server refused the statement (a record already there, a
		// marker taken by a read-back, a deadlock): the implicit
		// transaction is rolled back.
		s.fastMisses.Add(1)
		s.logger.Debug("postgres: one-statement claim refused", "err", err)
		return false, nil
	default:
		// The answer was lost: committed or not, only the marker knows.
		if serr := s.settleCommit(ctx, marker, err); serr != nil {
			if errors.Is(serr, errCommitAborted) {
				// Nothing committed: the claim runs again, locked.
				s.fastMisses.Add(1)
				s.retries.Add(1)
				return false, nil
			}
			return true, serr
		}
	}
	s.fastInserts.Add(1)
	if len(spec.events) > 0 {
		s.wake()
	}
	return true, nil
}

// lockList builds one SELECT of transaction-scoped advisory locks, taken
// in the order they were added.
type lockList struct {
	sql  strings.Builder
	args []any
}

func (l *lockList) add(ns int32, name string) {
	if len(l.args) == 0 {
		l.sql.WriteString("SELECT ")
	} else {
		l.sql.WriteString(", ")
	}
	l.args = append(l.args, ns, lockID(name))
	fmt.Fprintf(&l.sql, "pg_advisory_xact_lock($%d, $%d)", len(l.args)-1, len(l.args))
}

// fastInsertSQL is the row's insert in the one statement; $1…$10 are
// PutRow's arguments, cast because an INSERT … SELECT does not infer them.
const fastInsertSQL = `INSERT INTO rows (tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc,
		approval_id, approval_expires_at)
	SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::timestamptz, $7::timestamptz, $8::jsonb, $9::text, $10::timestamptz`

// statement builds the one statement and its arguments.
func (t *specTx) statement(marker string) (string, []any, error) {
	args, err := rowArgs(*t.row)
	if err != nil {
		return "", nil, err
	}
	var q strings.Builder
	q.WriteString("WITH r AS (")
	q.WriteString(fastInsertSQL)
	if len(t.noOrphans) > 0 {
		q.WriteString(" WHERE NOT EXISTS (SELECT 1 FROM orphans WHERE local_id = $3)")
	}
	q.WriteString(" ON CONFLICT DO NOTHING RETURNING 1)")
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(t.events) > 0 {
		tenants, keys, docs := make([]string, len(t.events)), make([]string, len(t.events)), make([]string, len(t.events))
		for i, e := range t.events {
			b, err := json.Marshal(e)
			if err != nil {
				return "", nil, fmt.Errorf("append outbox: %w", err)
			}
			tenants[i], keys[i], docs[i] = e.Tenant, e.Key, string(b)
		}
		fmt.Fprintf(&q, `, o AS (INSERT INTO outbox (tenant, key, event)
			SELECT u.t, u.k, u.e::jsonb FROM r, unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS u(t, k, e, n) ORDER BY u.n)`,
			param(tenants), param(keys), param(docs))
	}
	for i, r := range t.records {
		doc, err := json.Marshal(r.rec)
		if err != nil {
			return "", nil, fmt.Errorf("encode idempotency record: %w", err)
		}
		fmt.Fprintf(&q, `, i%d AS (INSERT INTO idempotency (scope, key_hash, at, rec) SELECT %s::text, %s::text, %s::timestamptz, %s::jsonb FROM r)`,
			i, param(r.scope), param(r.hash), param(micros(r.rec.At)), param(string(doc)))
	}
	fmt.Fprintf(&q, `, m AS (INSERT INTO commit_markers (id) SELECT %s::text FROM r) SELECT EXISTS (SELECT 1 FROM r)`, param(marker))
	return q.String(), args, nil
}

// rowArgs are a row's INSERT/UPDATE arguments: the key, the indexed
// columns and the document.
func rowArgs(row ledger.Row) ([]any, error) {
	doc, err := encodeRow(row)
	if err != nil {
		return nil, err
	}
	var approvalID *string
	var approvalExpires *time.Time
	if row.Approval != nil {
		approvalID = &row.Approval.ID
	}
	if row.ApprovalOpen() {
		approvalExpires = nullTime(row.Approval.ExpiresAt)
	}
	return []any{row.Tenant, row.Key, row.MetadataLocalID, string(row.Status), row.RunID,
		micros(row.FirstSeenAt), nullTime(row.NextCheckAt), doc, approvalID, approvalExpires}, nil
}
