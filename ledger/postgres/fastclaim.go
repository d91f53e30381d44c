package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// A claim of a new key is the common case, and it needs no locked read:
// what the flow would read is "nothing" (no row under the key, none under
// its local id, no parked orphan, no Idempotency-Key record), and the
// writes that follow (the row, its outbox records, the key's record) are
// known before anything is read. So Claim first runs the ledger's own claim
// flow against a speculative Tx (specTx) that answers every read with
// "nothing" and records the writes, then sends those writes as one call of
// recon_claim_new (migrations/0009_fast_claim.sql) in an implicit
// transaction, each guarded by what makes the "nothing" true at commit:
//
//   - no row under the key or the local id: the row's INSERT … ON CONFLICT
//     DO NOTHING inserts, or meets a committed (or waits for an in-flight)
//     row under the primary key, the local id or the approval id and
//     inserts nothing; and the key's advisory lock, taken first, waits for
//     a locked flow that read the key as missing;
//   - no Idempotency-Key record: the record's plain INSERT, whose unique
//     violation aborts the transaction, after the record's advisory lock;
//   - no parked orphan: an EXISTS check after the local id's advisory lock
//     is granted, as a statement of its own inside the function (a
//     VOLATILE function's statements each take a new snapshot under READ
//     COMMITTED, so the check sees an orphan committed while the call
//     waited), the lock a webhook's RowByLocalID takes before it reads the
//     row and parks an orphan — so a webhook racing the claim either joins
//     the new row or parks an orphan the claim sees.
//
// The function writes the rest only once the row is in, so the call writes
// all or nothing. (Its outbox records wake the relays after the commit, as
// every transaction's do: Store.wake.) It was a pipeline of a lock SELECT
// and a CTE; one call of a function the server plans once per session is
// the same round trip with one statement to bind. Anything else — the row
// (or a record) was there, the flow read or wrote something the
// speculation does not cover, the flow failed — runs the ordinary locked
// transaction (Store.run), where the flow decides on what it reads: only a
// conflict pays for the locks.
//
// The call also inserts the transaction's commit marker, so a call whose
// answer was lost is settled as a COMMIT's is (settleCommit): committed,
// the speculative answer stands; not, the claim runs again as a locked
// transaction.

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
	args, err := spec.arguments(marker)
	if err != nil {
		return false, nil //nolint:nilerr // an encoding failure: the locked path reports it
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, nil //nolint:nilerr // nothing was sent: the locked path retries and reports
	}
	defer conn.Release()
	var inserted bool
	err = conn.QueryRow(ctx, claimNewSQL, args...).Scan(&inserted)
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

// claimNewSQL calls the one statement (migrations/0009_fast_claim.sql);
// its arguments are arguments' in order.
const claimNewSQL = `SELECT recon_claim_new($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`

// arguments are the one statement's: the locks the locked flow takes for
// the same reads, in its order (Idempotency-Key record, key, local id) — a
// locked flow that read one of them as missing decides on that until its
// COMMIT, so this insert waits for it (without the key's lock the insert
// committed in between, and the locked flow's local-id check then met this
// row and answered "local id in use" to a claim of the same key; without
// the record's, its upsert overwrote this record; the porcupine check
// caught the first) — then the row's columns, whether to check for a
// parked orphan, the outbox records, the Idempotency-Key records and the
// commit marker.
func (t *specTx) arguments(marker string) ([]any, error) {
	var lockNS, lockIDs []int32
	lock := func(ns int32, name string) {
		lockNS, lockIDs = append(lockNS, ns), append(lockIDs, lockID(name))
	}
	for _, k := range t.absentRecord {
		lock(lockIdempotency, pairName(k[0], k[1]))
	}
	lock(lockRow, pairName(t.row.Tenant, t.row.Key))
	if len(t.noOrphans) > 0 {
		lock(lockLocalID, t.row.MetadataLocalID)
	}
	row, err := rowArgs(*t.row)
	if err != nil {
		return nil, err
	}
	// Empty lists go as NULL: an array's encoding is most of a parameter's
	// cost, and a claim usually has no event and no record.
	evTenants, evKeys, evDocs := any(nil), any(nil), any(nil)
	if n := len(t.events); n > 0 {
		tenants, keys, docs := make([]string, n), make([]string, n), make([]string, n)
		for i, e := range t.events {
			b, err := json.Marshal(e)
			if err != nil {
				return nil, fmt.Errorf("append outbox: %w", err)
			}
			tenants[i], keys[i], docs[i] = e.Tenant, e.Key, string(b)
		}
		evTenants, evKeys, evDocs = tenants, keys, docs
	}
	recScopes, recHashes, recAts, recDocs := any(nil), any(nil), any(nil), any(nil)
	if n := len(t.records); n > 0 {
		scopes, hashes, ats, docs := make([]string, n), make([]string, n), make([]time.Time, n), make([]string, n)
		for i, r := range t.records {
			doc, err := json.Marshal(r.rec)
			if err != nil {
				return nil, fmt.Errorf("encode idempotency record: %w", err)
			}
			scopes[i], hashes[i], ats[i], docs[i] = r.scope, r.hash, micros(r.rec.At), string(doc)
		}
		recScopes, recHashes, recAts, recDocs = scopes, hashes, ats, docs
	}
	args := make([]any, 0, 21)
	args = append(args, lockNS, lockIDs)
	args = append(args, row...)
	return append(args, len(t.noOrphans) > 0, evTenants, evKeys, evDocs, recScopes, recHashes, recAts, recDocs, marker), nil
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
