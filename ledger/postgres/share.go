package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// ClaimDue lets N replicas share the resolver's work. In one transaction it
// takes up to limit open rows due at or before now, earliest first, with
// FOR UPDATE SKIP LOCKED (a row another transaction holds is skipped, not
// waited for), and moves each one's next_check_at to now+lease, so every
// other replica's ClaimDue skips it until the lease ends. It returns the
// rows as stored after the move. The resolver then settles or Reschedules
// each row; a replica that dies mid-lease leaves its rows due again when
// the lease ends. Leases are measured on the callers' clocks, so replicas
// need clocks closer together than the lease.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]ledger.Row, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("claim due: %w", errClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		return nil, fmt.Errorf("claim due: lease must be positive, got %s", lease)
	}
	var out []ledger.Row
	err := s.run(ctx, true, func(tx *pgTx) error {
		rows, err := queryRows(tx, "claim due", dueSQL+` FOR UPDATE SKIP LOCKED`, micros(now), limit)
		if err != nil {
			return err
		}
		out = out[:0]
		for _, old := range rows {
			row := old.Clone()
			if !ledger.Reschedule(&row, now.Add(lease)) {
				continue // cannot happen: the query takes open rows only
			}
			if err := tx.PutRow(&old, row); err != nil {
				return err
			}
			out = append(out, row)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim due: %w", err)
	}
	return out, nil
}

// ClaimEvents lets N replicas share the relay's work without publishing one
// row's events out of order. One pass at a time (a transaction-scoped
// advisory lock, held for a few milliseconds) takes, in sequence order, up
// to limit records that are not leased, skipping every record that has an
// earlier record of the same row (tenant, key) still leased, and not held,
// by anyone, and leases them until now+lease. The caller publishes them in
// the order returned and then deletes them with AckEvents, or first holds
// them with HoldEvents; a record neither deleted nor held becomes claimable
// again when its lease ends (JetStream's Nats-Msg-Id dedupe makes that
// second publish harmless), and so does a held one when its hold ends.
//
// Guarantee: while leases are honoured (a relay publishes and acks within
// its lease), no record is handed to two relays at once, and a row's
// records are handed out only after every earlier record of that row was
// published (deleted or held) or is in the same batch, so each row's events
// are published in commit order. Records of different rows carry no order
// between them.
func (s *Store) ClaimEvents(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]ledger.OutboxRecord, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("claim events: %w", errClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		return nil, fmt.Errorf("claim events: lease must be positive, got %s", lease)
	}
	var out []ledger.OutboxRecord
	err := s.run(ctx, true, func(tx *pgTx) error {
		if err := tx.execAsync("relay lock", `SELECT pg_advisory_xact_lock($1, 0)`, int32(lockRelay)); err != nil {
			return err
		}
		var err error
		out, err = queryEvents(tx, `WITH pick AS (
				SELECT o.seq FROM outbox o
				WHERE (o.lease_until IS NULL OR o.lease_until <= $1)
				  AND NOT EXISTS (SELECT 1 FROM outbox p
					WHERE p.tenant = o.tenant AND p.key = o.key AND p.seq < o.seq AND p.lease_until > $1 AND NOT p.held)
				ORDER BY o.seq LIMIT $2)
			UPDATE outbox SET lease_until = $3, held = false FROM pick WHERE outbox.seq = pick.seq
			RETURNING outbox.seq, outbox.event`, micros(now), limit, micros(now.Add(lease)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	// UPDATE … RETURNING has no order of its own.
	sortRecords(out)
	return out, nil
}

// HoldEvents marks records the caller published (and leased with
// ClaimEvents) as held until until: ClaimEvents hands none of them out
// before then, and none of them keeps a later record of its row waiting.
// A relay holds a record while the stream may not have synced it yet, and
// deletes it with AckEvents once it has; if the relay dies first, the
// record is handed out again when the hold ends. Unknown sequence numbers
// are ignored.
func (s *Store) HoldEvents(ctx context.Context, until time.Time, seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	err := s.run(ctx, true, func(tx *pgTx) error {
		return tx.execAsync("hold events", `UPDATE outbox SET held = true, lease_until = $1 WHERE seq = ANY($2)`, micros(until), seqIDs(seqs))
	})
	if err != nil {
		return fmt.Errorf("hold events: %w", err)
	}
	return nil
}

func sortRecords(recs []ledger.OutboxRecord) {
	slices.SortFunc(recs, func(a, b ledger.OutboxRecord) int { return cmp.Compare(a.Seq, b.Seq) })
}
