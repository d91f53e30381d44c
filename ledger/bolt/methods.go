package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// pruneChunk bounds one prune op, so a large backlog never holds a group
// (and the callers queued behind it) for long.
const pruneChunk = 2048

// PruneInbox walks inbox_by_time from the oldest entry and removes every
// event first seen before cutoff, pruneChunk per group commit.
func (s *Store) PruneInbox(ctx context.Context, cutoff time.Time) (int, error) {
	n, err := s.pruneByTime(ctx, bucketInboxByTime, bucketInbox, cutoff, nil)
	if err != nil {
		return n, fmt.Errorf("prune inbox: %w", err)
	}
	return n, nil
}

// pruneByTime walks a time index (8-byte big-endian time, then the main
// bucket's key) from its oldest entry and deletes every entry before
// cutoff from both buckets, pruneChunk index entries per group commit, so
// the committer is never held for long. An index entry whose value live
// reports written again since (a newer entry indexes it) goes without its
// value. It returns how many values it removed.
func (s *Store) pruneByTime(ctx context.Context, index, main []byte, cutoff time.Time, live func(v []byte) bool) (int, error) {
	limit := timeKey(cutoff)
	total := 0
	for {
		var walked, n int
		err := s.write(ctx, func(tx *boltTx) error {
			walked, n = 0, 0
			byTime, b := tx.bucket(index), tx.bucket(main)
			var keys [][]byte
			c := byTime.Cursor()
			for k, _ := c.First(); k != nil && len(keys) < pruneChunk; k, _ = c.Next() {
				if len(k) < 8 || binary.BigEndian.Uint64(k[:8]) >= limit {
					break
				}
				keys = append(keys, cloneBytes(k))
			}
			if len(keys) > 0 {
				tx.writes++
			}
			for _, k := range keys {
				if err := byTime.Delete(k); err != nil {
					return err
				}
				if live != nil {
					if v := b.Get(k[8:]); v == nil || live(v) {
						continue
					}
				}
				if err := b.Delete(k[8:]); err != nil {
					return err
				}
				n++
			}
			walked = len(keys)
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if walked < pruneChunk {
			return total, nil
		}
	}
}

// AckEvents deletes published outbox records in a group commit.
func (s *Store) AckEvents(ctx context.Context, seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *boltTx) error {
		ob := tx.bucket(bucketOutbox)
		for _, seq := range seqs {
			k := seqKey(seq)
			if ob.Get(k) == nil {
				continue // acked before, or never written: nothing to commit
			}
			tx.writes++
			if err := ob.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ack events: %w", err)
	}
	return nil
}

// Get reads one row in a read transaction.
func (s *Store) Get(ctx context.Context, tenant, key string) (ledger.Row, error) {
	var row ledger.Row
	err := s.view(ctx, func(tx *boltTx) error {
		var err error
		row, err = tx.GetRow(tenant, key)
		return err
	})
	if err != nil {
		return ledger.Row{}, fmt.Errorf("get: %w", err)
	}
	return row, nil
}

// Due walks the due index from its start: it holds open rows only, ordered
// by next_check_at, so the walk stops at the first entry after now or at
// limit, whatever the number of settled rows.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]ledger.Row, error) {
	if limit <= 0 {
		return nil, nil
	}
	until := timeKey(now)
	var rows []ledger.Row
	err := s.view(ctx, func(tx *boltTx) error {
		c := tx.bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil && len(rows) < limit; k, _ = c.Next() {
			if len(k) < 8 || binary.BigEndian.Uint64(k[:8]) > until {
				break
			}
			v, err := tx.rowValueRK(k[8:])
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("due entry %q: dangling", k[8:])
			}
			r, err := decodeRow(v)
			if err != nil {
				return err
			}
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("due: %w", err)
	}
	return rows, nil
}

// PendingEvents returns the first limit outbox records in sequence order.
func (s *Store) PendingEvents(ctx context.Context, limit int) ([]ledger.OutboxRecord, error) {
	recs, err := s.eventsAfter(ctx, 0, limit)
	if err != nil {
		return nil, fmt.Errorf("pending events: %w", err)
	}
	return recs, nil
}

// EventsAfter returns up to limit outbox records with a sequence number
// above after, in sequence order (which is commit order: AppendOutbox).
func (s *Store) EventsAfter(ctx context.Context, after uint64, limit int) ([]ledger.OutboxRecord, error) {
	recs, err := s.eventsAfter(ctx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("events after %d: %w", after, err)
	}
	return recs, nil
}

func (s *Store) eventsAfter(ctx context.Context, after uint64, limit int) ([]ledger.OutboxRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	var recs []ledger.OutboxRecord
	err := s.view(ctx, func(tx *boltTx) error {
		c := tx.bucket(bucketOutbox).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(recs) < limit; k, v = c.Next() {
			var e ledger.Event
			if err := unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode outbox record: %w", err)
			}
			recs = append(recs, ledger.OutboxRecord{Seq: binary.BigEndian.Uint64(k), Event: e})
		}
		return nil
	})
	return recs, err
}

// CountEvents returns how many records the outbox holds. It walks the
// bucket's pages (bbolt keeps no key count), so it costs O(records); the
// relay asks about once a second.
func (s *Store) CountEvents(ctx context.Context) (int, error) {
	var n int
	err := s.view(ctx, func(tx *boltTx) error {
		n = tx.bucket(bucketOutbox).KeyN()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return n, nil
}

// List walks the tenant's by_time entries backwards (newest first) from the
// cursor, applying the status and run_id filters while scanning. The cursor
// is the by_time position (first_seen_at ‖ key) of the last row returned,
// base64url-encoded; the next page starts strictly before it, so rows
// inserted meanwhile never shift a page.
func (s *Store) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	if err := q.Validate(); err != nil {
		return ledger.Page{}, err
	}
	prefix := append([]byte(q.Tenant), sep)
	var start []byte // seek target; the walk begins at the entry before it
	if q.Cursor != "" {
		at, key, err := ledger.DecodeListCursor(q.Tenant, q.Cursor)
		if err != nil {
			return ledger.Page{}, err
		}
		start = append(appendUint64(append([]byte(nil), prefix...), timeKey(at)), key...)
	} else {
		// The first key after every tenant \x00 … entry.
		start = append([]byte(q.Tenant), sep+1)
	}
	var page ledger.Page
	err := s.view(ctx, func(tx *boltTx) error {
		c := tx.bucket(bucketByTime).Cursor()
		k, _ := c.Seek(start)
		if k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Prev() {
			pos := k[len(prefix):]
			if len(pos) < 9 {
				return fmt.Errorf("by_time entry %q: malformed", k)
			}
			v, err := tx.rowValue(q.Tenant, string(pos[8:]))
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("by_time entry %q: dangling", k)
			}
			r, err := decodeRow(v)
			if err != nil {
				return err
			}
			if q.Status != "" && r.Status != q.Status || q.RunID != "" && r.RunID != q.RunID {
				continue
			}
			if len(page.Rows) == q.Limit {
				// One more match exists: the page has a successor.
				last := page.Rows[len(page.Rows)-1]
				page.NextCursor = ledger.EncodeListCursor(q.Tenant, last.FirstSeenAt, last.Key)
				return nil
			}
			page.Rows = append(page.Rows, r)
		}
		return nil
	})
	if err != nil {
		return ledger.Page{}, fmt.Errorf("list: %w", err)
	}
	return page, nil
}
