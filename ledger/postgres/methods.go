package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// pruneChunk bounds one prune transaction, so a large backlog never holds
// locks on thousands of inbox records at once.
const pruneChunk = 5000

// PruneInbox deletes inbox records first seen before cutoff, oldest first,
// pruneChunk per transaction, through the first_seen index: O(removed).
func (s *Store) PruneInbox(ctx context.Context, cutoff time.Time) (int, error) {
	return s.pruneChunks(ctx, "prune inbox", `DELETE FROM inbox WHERE (vendor, event_id) IN (
		SELECT vendor, event_id FROM inbox WHERE first_seen < $1 ORDER BY first_seen LIMIT $2)`, cutoff)
}

// pruneChunks runs query (its $1 the cutoff, $2 pruneChunk) one
// transaction at a time until a run deletes fewer than pruneChunk rows,
// and returns how many it deleted in all.
func (s *Store) pruneChunks(ctx context.Context, what, query string, cutoff time.Time) (int, error) {
	total := 0
	for {
		var n int
		err := s.run(ctx, true, func(tx *pgTx) error {
			tag, err := tx.q.Exec(ctx, query, micros(cutoff), pruneChunk)
			if err != nil {
				return dbErr(what, err)
			}
			n = int(tag.RowsAffected())
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		total += n
		if n < pruneChunk {
			return total, nil
		}
	}
}

// AckEvents deletes published outbox records.
func (s *Store) AckEvents(ctx context.Context, seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	ids := seqIDs(seqs)
	err := s.run(ctx, true, func(tx *pgTx) error {
		return tx.execAsync("ack events", `DELETE FROM outbox WHERE seq = ANY($1)`, ids)
	})
	if err != nil {
		return fmt.Errorf("ack events: %w", err)
	}
	return nil
}

// Get reads one row (no transaction: one statement sees one snapshot).
func (s *Store) Get(ctx context.Context, tenant, key string) (ledger.Row, error) {
	var row ledger.Row
	err := s.run(ctx, false, func(tx *pgTx) error {
		var err error
		row, err = tx.GetRow(tenant, key)
		return err
	})
	if err != nil {
		return ledger.Row{}, fmt.Errorf("get: %w", err)
	}
	return row, nil
}

// queryRows runs a query whose only column is a row document.
func queryRows(tx *pgTx, op, sql string, args ...any) ([]ledger.Row, error) {
	rs, err := tx.q.Query(tx.ctx, sql, args...)
	if err != nil {
		return nil, dbErr(op, err)
	}
	docs, err := pgx.CollectRows(rs, pgx.RowTo[[]byte])
	if err != nil {
		return nil, dbErr(op, err)
	}
	rows := make([]ledger.Row, 0, len(docs))
	for _, d := range docs {
		r, err := decodeRow(d)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// dueSQL walks the partial due index (open rows only) from its start.
const dueSQL = `SELECT doc FROM rows
	WHERE status IN ('pending', 'unknown') AND next_check_at <= $1
	ORDER BY next_check_at, tenant, key LIMIT $2`

// Due returns up to limit open rows with next_check_at at or before now,
// earliest first. It is a plain read: two replicas calling it get the same
// rows. Replicas that share the resolver's work use ClaimDue.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]ledger.Row, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("due: %w", errClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	var rows []ledger.Row
	err := s.run(ctx, false, func(tx *pgTx) error {
		var err error
		rows, err = queryRows(tx, "due", dueSQL, micros(now), limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("due: %w", err)
	}
	return rows, nil
}

// PendingEvents returns the first limit outbox records in sequence order. It
// is a plain read; replicas that share the relay's work use ClaimEvents.
func (s *Store) PendingEvents(ctx context.Context, limit int) ([]ledger.OutboxRecord, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("pending events: %w", errClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	var recs []ledger.OutboxRecord
	err := s.run(ctx, false, func(tx *pgTx) error {
		var err error
		recs, err = queryEvents(tx, `SELECT seq, event FROM outbox ORDER BY seq LIMIT $1`, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pending events: %w", err)
	}
	return recs, nil
}

// EventsAfter returns up to limit outbox records with a sequence number
// above after, in sequence order. A lower number can commit after a higher
// one here, so a reader that moves past what it read can miss a record:
// relays lease records with ClaimEvents instead.
func (s *Store) EventsAfter(ctx context.Context, after uint64, limit int) ([]ledger.OutboxRecord, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("events after %d: %w", after, errClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	var recs []ledger.OutboxRecord
	err := s.run(ctx, false, func(tx *pgTx) error {
		var err error
		recs, err = queryEvents(tx, `SELECT seq, event FROM outbox WHERE seq > $1 ORDER BY seq LIMIT $2`, int64(after), limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("events after %d: %w", after, err)
	}
	return recs, nil
}

// CountEvents returns how many outbox records are not held (HoldEvents):
// the records no relay has published yet. It scans the table.
func (s *Store) CountEvents(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("count events: %w", errClosed)
	}
	var n int64
	err := s.run(ctx, false, func(tx *pgTx) error {
		if err := tx.q.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE NOT held`).Scan(&n); err != nil {
			return dbErr("count events", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return int(n), nil
}

// seqIDs converts outbox sequence numbers to the bigint array PostgreSQL takes.
func seqIDs(seqs []uint64) []int64 {
	ids := make([]int64, len(seqs))
	for i, q := range seqs {
		ids[i] = int64(q)
	}
	return ids
}

func queryEvents(tx *pgTx, sql string, args ...any) ([]ledger.OutboxRecord, error) {
	rs, err := tx.q.Query(tx.ctx, sql, args...)
	if err != nil {
		return nil, dbErr("outbox", err)
	}
	type rec struct {
		Seq   int64
		Event []byte
	}
	raw, err := pgx.CollectRows(rs, pgx.RowToStructByPos[rec])
	if err != nil {
		return nil, dbErr("outbox", err)
	}
	out := make([]ledger.OutboxRecord, 0, len(raw))
	for _, r := range raw {
		var e ledger.Event
		if err := json.Unmarshal(r.Event, &e); err != nil {
			return nil, fmt.Errorf("decode outbox record %d: %w", r.Seq, err)
		}
		out = append(out, ledger.OutboxRecord{Seq: uint64(r.Seq), Event: e})
	}
	return out, nil
}

// List returns a page of the tenant's rows newest first (first_seen_at,
// then key, descending) through the (tenant, first_seen_at DESC, key DESC)
// index; the filters are applied by the query, and one extra row says
// whether another page exists. The cursor is the (first_seen_at, key) of
// the last row returned; the next page starts strictly after it, so rows
// inserted meanwhile never shift a page.
func (s *Store) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	if err := q.Validate(); err != nil {
		return ledger.Page{}, err
	}
	if s.closed.Load() {
		return ledger.Page{}, fmt.Errorf("list: %w", errClosed)
	}
	var sb strings.Builder
	sb.WriteString(`SELECT doc FROM rows WHERE tenant = $1`)
	args := []any{q.Tenant}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Cursor != "" {
		at, key, err := ledger.DecodeListCursor(q.Tenant, q.Cursor)
		if err != nil {
			return ledger.Page{}, err
		}
		fmt.Fprintf(&sb, ` AND (first_seen_at, key) < (%s, %s)`, arg(at), arg(key))
	}
	if q.Status != "" {
		fmt.Fprintf(&sb, ` AND status = %s`, arg(string(q.Status)))
	}
	if q.RunID != "" {
		fmt.Fprintf(&sb, ` AND run_id = %s`, arg(q.RunID))
	}
	fmt.Fprintf(&sb, ` ORDER BY first_seen_at DESC, key DESC LIMIT %s`, arg(q.Limit+1))
	var page ledger.Page
	err := s.run(ctx, false, func(tx *pgTx) error {
		rows, err := queryRows(tx, "list", sb.String(), args...)
		if err != nil {
			return err
		}
		if len(rows) > q.Limit {
			rows = rows[:q.Limit]
			last := rows[len(rows)-1]
			page.NextCursor = ledger.EncodeListCursor(q.Tenant, micros(last.FirstSeenAt), last.Key)
		}
		page.Rows = rows
		return nil
	})
	if err != nil {
		return ledger.Page{}, fmt.Errorf("list: %w", err)
	}
	return page, nil
}
