package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentledger/reconciler/ledger"
)

// The row journal (ledger.JournalTx, ledger.Journals), the complete row
// search (ledger.Finder) and the console's sign-outs (ledger.Revocations),
// in the tables of migration 0008.

var (
	_ ledger.JournalTx   = (*pgTx)(nil)
	_ ledger.Journals    = (*Store)(nil)
	_ ledger.Finder      = (*Store)(nil)
	_ ledger.Revocations = (*Store)(nil)
)

// appendJournalSQL inserts an entry and, in the same statement, deletes the
// row's entries older than the newest MaxJournalPerRow-1 already stored (the
// DELETE's snapshot does not see the INSERT's row), so a row keeps at most
// MaxJournalPerRow. The flow holds the row's lock, so appends of one row
// do not interleave.
const appendJournalSQL = `WITH ins AS (
		INSERT INTO row_journal (tenant, key, entry) VALUES ($1, $2, $3::jsonb))
	DELETE FROM row_journal WHERE tenant = $1 AND key = $2 AND seq <= (
		SELECT seq FROM row_journal WHERE tenant = $1 AND key = $2 ORDER BY seq DESC OFFSET $4 LIMIT 1)`

// AppendJournal implements ledger.JournalTx.
func (t *pgTx) AppendJournal(e ledger.JournalEntry) error {
	doc, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("append journal: encode: %w", err)
	}
	// In a write transaction with the COMMIT, in the order queued: nothing
	// in a flow reads the journal, and the row's lock, held until the
	// COMMIT, keeps a row's appends from interleaving.
	return t.atCommitOrExec("append journal", appendJournalSQL, e.Tenant, e.Key, string(doc), ledger.MaxJournalPerRow-1)
}

// RowJournal implements ledger.Journals.
func (s *Store) RowJournal(ctx context.Context, tenant, key string) ([]ledger.JournalEntry, error) {
	var out []ledger.JournalEntry
	err := s.run(ctx, false, func(tx *pgTx) error {
		out = nil
		rs, err := tx.q.Query(tx.ctx, `SELECT seq, entry FROM row_journal WHERE tenant = $1 AND key = $2 ORDER BY seq`, tenant, key)
		if err != nil {
			return dbErr("row journal", err)
		}
		defer rs.Close()
		for rs.Next() {
			var (
				seq int64
				doc []byte
				e   ledger.JournalEntry
			)
			if err := rs.Scan(&seq, &doc); err != nil {
				return dbErr("row journal", err)
			}
			if err := json.Unmarshal(doc, &e); err != nil {
				return fmt.Errorf("decode journal entry: %w", err)
			}
			e.Seq = uint64(seq)
			out = append(out, e)
		}
		if err := rs.Err(); err != nil {
			return dbErr("row journal", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("row journal: %w", err)
	}
	return out, nil
}

// FindRows implements ledger.Finder: one query, through the local id's
// unique index or a WHERE on the row document over the tenant's rows (no
// index: the claim and outcome path keeps none for it). A statement the
// context's deadline ends answers Cut, with no rows.
func (s *Store) FindRows(ctx context.Context, q ledger.FindQuery) (ledger.Found, error) {
	if err := q.Validate(); err != nil {
		return ledger.Found{}, err
	}
	sql, arg := `SELECT doc FROM rows WHERE tenant = $1 AND metadata_local_id = $2`, q.LocalID
	switch {
	case q.ReceiptID != "":
		sql, arg = `SELECT doc FROM rows WHERE tenant = $1 AND doc->'row'->>'upstream_receipt_id' = $2`, q.ReceiptID
	case q.ToolCallID != "":
		sql, arg = `SELECT doc FROM rows WHERE tenant = $1 AND doc->'row'->>'tool_call_id' = $2`, q.ToolCallID
	}
	sql += ` ORDER BY first_seen_at DESC, key DESC LIMIT $3`
	var f ledger.Found
	err := s.run(ctx, false, func(tx *pgTx) error {
		var err error
		f.Rows, err = queryRows(tx, "find rows", sql, q.Tenant, arg, q.Limit)
		return err
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return ledger.Found{Cut: true}, nil
		}
		return ledger.Found{}, fmt.Errorf("find rows: %w", err)
	}
	return f, nil
}

// RevokeSession implements ledger.Revocations.
func (s *Store) RevokeSession(ctx context.Context, id string, until, now time.Time) error {
	if err := ledger.ValidateSessionID(id); err != nil {
		return err
	}
	err := s.run(ctx, true, func(tx *pgTx) error {
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM console_revocations WHERE until < $1`, now.UTC())
		b.Queue(`INSERT INTO console_revocations (id, until) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET until = EXCLUDED.until`, id, until.UTC())
		if err := tx.q.SendBatch(tx.ctx, b).Close(); err != nil {
			return dbErr("revoke session", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// SessionRevoked implements ledger.Revocations.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.run(ctx, false, func(tx *pgTx) error {
		err := tx.q.QueryRow(tx.ctx, `SELECT true FROM console_revocations WHERE id = $1`, id).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			ok = false
			return nil
		}
		if err != nil {
			return dbErr("session revoked", err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("session revoked: %w", err)
	}
	return ok, nil
}
