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

// maxProblems bounds the report of CheckConsistency.
const maxProblems = 20

// CheckConsistency reads the whole schema in one REPEATABLE READ snapshot
// and checks what the constraints cannot: every row's indexed columns agree
// with its document (tenant, key, local id, status, run_id, first_seen_at,
// next_check_at), so the due index holds exactly the open rows under their
// next_check_at; every open row has a next check; every outbox record,
// inbox record and orphan decodes and sits under its own ids; outbox
// sequence numbers are below the sequence's last value. Primary keys and
// the UNIQUE local id make the rest (one row per key, local ids unique and
// present) hold by construction.
func (s *Store) CheckConsistency(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("check consistency: %w", errClosed)
	}
	var problems []error
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	err := s.run(ctx, false, func(_ *pgTx) error {
		problems = problems[:0]
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if err := checkRows(ctx, tx, report); err != nil {
				return err
			}
			return checkRecords(ctx, tx, report)
		})
	})
	if err != nil {
		var de *dbError
		if !errors.As(err, &de) && !errors.Is(err, ledger.ErrUnavailable) && ctx.Err() == nil {
			err = dbErr("check consistency", err)
		}
		return fmt.Errorf("check consistency: %w", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("check consistency: %w", errors.Join(problems...))
	}
	return nil
}

func checkRows(ctx context.Context, tx pgx.Tx, report func(string, ...any)) error {
	rs, err := tx.Query(ctx, `SELECT tenant, key, metadata_local_id, status, run_id, first_seen_at, next_check_at, doc FROM rows`)
	if err != nil {
		return dbErr("check rows", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			tenant, key, lid, status, runID string
			firstSeen                       time.Time
			nextCheck                       *time.Time
			doc                             []byte
		)
		if err := rs.Scan(&tenant, &key, &lid, &status, &runID, &firstSeen, &nextCheck, &doc); err != nil {
			return dbErr("check rows", err)
		}
		r, err := decodeRow(doc)
		if err != nil {
			report("row %s/%s: %v", tenant, key, err)
			continue
		}
		id := tenant + "/" + key
		if r.Tenant != tenant || r.Key != key {
			report("row %s: holds the row of %s/%s", id, r.Tenant, r.Key)
		}
		if r.MetadataLocalID != lid || lid == "" {
			report("row %s: local id column %q, row %q", id, lid, r.MetadataLocalID)
		}
		if string(r.Status) != status || !r.Status.Valid() {
			report("row %s: status column %q, row %q", id, status, r.Status)
		}
		if r.RunID != runID {
			report("row %s: run_id column %q, row %q", id, runID, r.RunID)
		}
		if !firstSeen.Equal(micros(r.FirstSeenAt)) {
			report("row %s: first_seen_at column %s, row %s", id, firstSeen, r.FirstSeenAt)
		}
		want := nullTime(r.NextCheckAt)
		if (nextCheck == nil) != (want == nil) || nextCheck != nil && !nextCheck.Equal(*want) {
			report("row %s: next_check_at column %v, row %s", id, nextCheck, r.NextCheckAt)
		}
		if r.Status.Open() && nextCheck == nil {
			report("row %s: open (%s) but never due", id, r.Status)
		}
	}
	if err := rs.Err(); err != nil {
		return dbErr("check rows", err)
	}
	return nil
}

func checkRecords(ctx context.Context, tx pgx.Tx, report func(string, ...any)) error {
	var lastSeq int64
	var called bool
	if err := tx.QueryRow(ctx, `SELECT last_value, is_called FROM outbox_seq_seq`).Scan(&lastSeq, &called); err != nil {
		return dbErr("check outbox sequence", err)
	}
	rs, err := tx.Query(ctx, `SELECT seq, tenant, key, event FROM outbox ORDER BY seq`)
	if err != nil {
		return dbErr("check outbox", err)
	}
	for rs.Next() {
		var (
			seq         int64
			tenant, key string
			b           []byte
		)
		if err := rs.Scan(&seq, &tenant, &key, &b); err != nil {
			rs.Close()
			return dbErr("check outbox", err)
		}
		var e ledger.Event
		if err := json.Unmarshal(b, &e); err != nil {
			report("outbox %d: %v", seq, err)
		} else if e.Tenant != tenant || e.Key != key {
			report("outbox %d: filed under %s/%s, event of %s/%s", seq, tenant, key, e.Tenant, e.Key)
		}
		if !called || seq > lastSeq {
			report("outbox %d: beyond the sequence's last value %d", seq, lastSeq)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return dbErr("check outbox", err)
	}

	var bad int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE result NOT IN ('accepted', 'duplicate', 'orphan', 'foreign_tenant', 'unmatched', 'ignored')`).Scan(&bad); err != nil {
		return dbErr("check inbox", err)
	}
	if bad > 0 {
		report("inbox: %d records with an unknown result", bad)
	}

	ors, err := tx.Query(ctx, `SELECT local_id, vendor, event_id, delivery FROM orphans`)
	if err != nil {
		return dbErr("check orphans", err)
	}
	defer ors.Close()
	for ors.Next() {
		var (
			lid, vendor, eventID string
			b                    []byte
		)
		if err := ors.Scan(&lid, &vendor, &eventID, &b); err != nil {
			return dbErr("check orphans", err)
		}
		var d ledger.Delivery
		if err := json.Unmarshal(b, &d); err != nil {
			report("orphan %s/%s/%s: %v", lid, vendor, eventID, err)
		} else if d.LocalID != lid || d.Vendor != vendor || d.EventID != eventID {
			report("orphan %s/%s/%s: holds %s/%s/%s", lid, vendor, eventID, d.LocalID, d.Vendor, d.EventID)
		}
	}
	if err := ors.Err(); err != nil {
		return dbErr("check orphans", err)
	}
	return nil
}
