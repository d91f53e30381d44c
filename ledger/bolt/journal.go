package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The row journal (ledger.JournalTx, ledger.Journals), the complete row
// search (ledger.Finder) and the console's sign-outs (ledger.Revocations).
// Journal entries are written by the flows in the op of their action, so
// they go through the group committer and, with the write-ahead log, its
// layers like every other write; deleteRow drops a row's entries with it.

var (
	bucketJournal = []byte("journal")         // tenant \x00 key \x00 be64(seq) → JSON ledger.JournalEntry; be64(0) → be64(count)
	bucketRevoked = []byte("console_revoked") // session id → be64(until)
)

var (
	_ ledger.JournalTx   = (*boltTx)(nil)
	_ ledger.Journals    = (*Store)(nil)
	_ ledger.Finder      = (*Store)(nil)
	_ ledger.Revocations = (*Store)(nil)
)

// journalPrefix is tenant \x00 key \x00: every entry of one row.
func journalPrefix(tenant, key string) []byte { return append(join(tenant, key), sep) }

// journalKeys lists the keys of a row's entries, oldest first (copies:
// the cursor's slices are bbolt's).
func (t *boltTx) journalKeys(tenant, key string) [][]byte {
	prefix := journalPrefix(tenant, key)
	var keys [][]byte
	c := t.bucket(bucketJournal).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, cloneBytes(k))
	}
	return keys
}

// AppendJournal implements ledger.JournalTx: the entry under the bucket's
// next sequence, and the row's oldest entries past MaxJournalPerRow out.
//
// The row's entry count lives under its own prefix at sequence 0 (never a
// NextSequence value), so the trim costs one read and, once the row is
// full, one seek and one delete — not a walk of its 100 entries on every
// append, which made a hot row's repeated webhooks the committer's largest
// cost. A row without a count (written before it existed) is counted by a
// walk once.
func (t *boltTx) AppendJournal(e ledger.JournalEntry) error {
	b := t.bucket(bucketJournal)
	t.writes++ // before the first write: a failed one may have touched pages
	seq, err := b.NextSequence()
	if err != nil {
		return fmt.Errorf("append journal: %w", err)
	}
	e.Seq = seq
	v, err := marshal(e)
	if err != nil {
		return fmt.Errorf("append journal: encode: %w", err)
	}
	prefix := slices.Clip(journalPrefix(e.Tenant, e.Key)) // each appendUint64 below its own key
	if err := b.Put(appendUint64(prefix, seq), v); err != nil {
		return fmt.Errorf("append journal: %w", err)
	}
	countKey := appendUint64(prefix, journalCountSeq)
	var n int
	if c := b.Get(countKey); len(c) == 8 {
		n = int(binary.BigEndian.Uint64(c)) + 1
	} else {
		n = len(t.journalKeys(e.Tenant, e.Key)) // the new entry included; no count key yet
	}
	for ; n > ledger.MaxJournalPerRow; n-- {
		k, _ := b.Cursor().Seek(appendUint64(prefix, journalCountSeq+1))
		if k == nil || !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+8 {
			return fmt.Errorf("append journal: %s/%s counts %d entries, found fewer", e.Tenant, e.Key, n)
		}
		if err := b.Delete(cloneBytes(k)); err != nil {
			return fmt.Errorf("append journal: drop the oldest: %w", err)
		}
	}
	if err := b.Put(countKey, binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
		return fmt.Errorf("append journal: count: %w", err)
	}
	return nil
}

// journalCountSeq is the sequence under which a row's prefix holds its
// entry count (bbolt's NextSequence starts at 1).
const journalCountSeq = 0

// isJournalCount says whether k, under a row's prefix of length n, is the
// row's count rather than an entry.
func isJournalCount(k []byte, n int) bool {
	return len(k) == n+8 && binary.BigEndian.Uint64(k[n:]) == journalCountSeq
}

// deleteJournal drops every entry of a row (retention).
func (t *boltTx) deleteJournal(tenant, key string) error {
	b := t.bucket(bucketJournal)
	for _, k := range t.journalKeys(tenant, key) {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete journal: %w", err)
		}
	}
	return nil
}

// RowJournal implements ledger.Journals with one read transaction.
func (s *Store) RowJournal(ctx context.Context, tenant, key string) ([]ledger.JournalEntry, error) {
	var out []ledger.JournalEntry
	err := s.view(ctx, func(tx *boltTx) error {
		prefix := journalPrefix(tenant, key)
		c := tx.bucket(bucketJournal).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if isJournalCount(k, len(prefix)) {
				continue
			}
			var e ledger.JournalEntry
			if err := unmarshal(v, &e); err != nil { // copies: v is bbolt's
				return fmt.Errorf("decode journal entry: %w", err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("row journal: %w", err)
	}
	return out, nil
}

// FindRows implements ledger.Finder: the local id index, else a scan of
// the rows (every tenant's: they are in sequence order) in one read
// transaction. A row's bytes are decoded only
// when they hold the value sought; the scan looks at ctx every
// ledger.FindCheckEvery rows and stops, Cut, when it is done.
func (s *Store) FindRows(ctx context.Context, q ledger.FindQuery) (ledger.Found, error) {
	if err := q.Validate(); err != nil {
		return ledger.Found{}, err
	}
	var f ledger.Found
	err := s.view(ctx, func(tx *boltTx) error {
		if q.LocalID != "" {
			r, err := tx.RowByLocalID(q.LocalID)
			if err == nil && r.Tenant == q.Tenant {
				f.Rows = append(f.Rows, r)
			}
			if errors.Is(err, ledger.ErrNotFound) {
				return nil
			}
			return err
		}
		needle := []byte(q.ReceiptID + q.ToolCallID)
		// Rows are in sequence order (schema 3), every tenant's mixed: the
		// walk covers the file, and q.Match keeps the tenant's.
		c := tx.bucket(bucketRows).Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n%ledger.FindCheckEvery == 0 && ctx.Err() != nil {
				f.Cut = true
				return nil
			}
			if !bytes.Contains(v, needle) {
				continue
			}
			r, err := decodeRow(v)
			if err != nil {
				return fmt.Errorf("row %q: %w", k, err)
			}
			if q.Match(r) {
				f.Rows = append(f.Rows, r)
			}
		}
		return nil
	})
	if err != nil {
		return ledger.Found{}, fmt.Errorf("find rows: %w", err)
	}
	f.Rows = q.Answer(f.Rows)
	return f, nil
}

// RevokeSession implements ledger.Revocations. Sign-outs are few (one per
// person per session), so it walks the bucket to forget expired ones.
func (s *Store) RevokeSession(ctx context.Context, id string, until, now time.Time) error {
	if err := ledger.ValidateSessionID(id); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *boltTx) error {
		b := tx.bucket(bucketRevoked)
		var old [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(v) == 8 && binary.BigEndian.Uint64(v) < timeKey(now) {
				old = append(old, cloneBytes(k))
			}
		}
		tx.writes++
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return b.Put([]byte(id), appendUint64(nil, timeKey(until)))
	})
	if err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// SessionRevoked implements ledger.Revocations.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.view(ctx, func(tx *boltTx) error {
		ok = tx.bucket(bucketRevoked).Get([]byte(id)) != nil
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("session revoked: %w", err)
	}
	return ok, nil
}
