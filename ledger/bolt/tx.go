package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// boltTx implements ledger.Tx over one bbolt transaction. In a group commit
// several ops share one boltTx, one after another, on the committer
// goroutine; writes counts mutations so the committer can tell an op that
// failed without touching the transaction (its error is simply delivered)
// from one that failed half-way (the group must roll back).
type boltTx struct {
	tx      *bolt.Tx
	store   *Store
	writes  int
	wakeSet bool
	buckets [len(allBuckets)]kvBucket
	// With the write-ahead log, tx is a bbolt read transaction and every
	// bucket is seen through layers (newest first) of writes bbolt does
	// not hold yet; a group's writes go to top (nil for a reader).
	wal    bool
	layers []*layer
	top    *layer
	// pre is the row the running op's caller encoded (preencode.go).
	pre *preRow
	// preRead is the row the running op's caller read (predecode.go).
	preRead *preRead
	// found is the last row rowSeq found (rowindex.go).
	found foundRow
}

var _ ledger.Tx = (*boltTx)(nil)

func newTx(s *Store, tx *bolt.Tx) *boltTx { return &boltTx{tx: tx, store: s} }

// bucket returns a bucket handle, looked up once per transaction. Every
// bucket is created by Open, so a missing one means a damaged file.
func (t *boltTx) bucket(name []byte) kvBucket {
	i := bucketIndex(name)
	if b := t.buckets[i]; b != nil {
		return b
	}
	b := t.tx.Bucket(name)
	if b == nil {
		panic(fmt.Sprintf("bolt: bucket %q missing", name))
	}
	if t.tx.Writable() {
		packRows(b, name)
	}
	var kb kvBucket = boltBucket{b}
	if t.wal {
		kb = &overlayBucket{i: i, layers: t.layers, base: b, top: t.top}
	}
	t.buckets[i] = kb
	return kb
}

func bucketIndex(name []byte) int {
	for i, n := range allBuckets {
		if bytes.Equal(n, name) {
			return i
		}
	}
	panic(fmt.Sprintf("bolt: unknown bucket %q", name))
}

// GetRow returns the row stored under tenant and key (rowindex.go).
func (t *boltTx) GetRow(tenant, key string) (ledger.Row, error) {
	v, err := t.rowValue(tenant, key)
	if err != nil {
		return ledger.Row{}, err
	}
	if v == nil {
		return ledger.Row{}, ledger.ErrNotFound
	}
	return decodeRow(v)
}

// RowByLocalID follows the local id index to the row.
func (t *boltTx) RowByLocalID(localID string) (ledger.Row, error) {
	lv := t.bucket(bucketLocalIDs).Get([]byte(localID))
	if lv == nil {
		return ledger.Row{}, ledger.ErrNotFound
	}
	seq, _, ok := splitLidValue(lv)
	if !ok {
		return ledger.Row{}, fmt.Errorf("local id %s: malformed index entry %x", localID, lv)
	}
	v := t.bucket(bucketRows).Get(seq)
	if v == nil {
		return ledger.Row{}, fmt.Errorf("local id %s: dangling index entry", localID)
	}
	return t.decodeJoined(localID, v)
}

// TenantsOfKey finds the tenants holding key: a row whose local id derives
// from its key (every minted key) is found through the local id index; other
// keys through the keys index (key \x00 tenant).
func (t *boltTx) TenantsOfKey(key string) ([]string, error) {
	var tenants []string
	if ledger.IsMintedKey(key) {
		if _, rk, ok := splitLidValue(t.bucket(bucketLocalIDs).Get([]byte(ledger.LocalID("", key, true)))); ok {
			if tenant, k, ok := splitRowKey(rk); ok && k == key {
				tenants = append(tenants, tenant)
			}
		}
	}
	prefix := append([]byte(key), sep)
	c := t.bucket(bucketKeys).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		tenants = append(tenants, string(k[len(prefix):]))
	}
	return tenants, nil
}

// keyIndexed reports whether row needs an entry in the keys index. A row
// whose local id is its key's own prefix (every minted key) is found by key
// through the local id index (rowindex.go), which saves one random-keyed
// B-tree insert per claim.
func keyIndexed(row *ledger.Row) bool {
	return !(ledger.IsMintedKey(row.Key) && row.MetadataLocalID == ledger.LocalID(row.Tenant, row.Key, true))
}

// PutRow writes row and moves its index entries: local id, key→tenant,
// due (open rows only, keyed by next_check_at), the approval indexes and
// by_time (first_seen_at).
// old must be the row as read in this transaction, nil for an insert.
func (t *boltTx) PutRow(old *ledger.Row, row ledger.Row) error {
	if old != nil && (old.Tenant != row.Tenant || old.Key != row.Key) {
		return fmt.Errorf("put row %s: old row is %s", row.Key, old.Key)
	}
	v, err := t.encodeInsert(old, &row)
	if err != nil {
		return err
	}
	rk := rowKey(row.Tenant, row.Key)
	rows := t.bucket(bucketRows)
	// The row's sequence: a stored row keeps its own; an insert takes the
	// bucket's next one below, after every check. Looking the row up
	// also refuses an insert over a stored row, which would orphan its
	// index entries.
	seq := t.rowSeq(row.Tenant, row.Key)
	if old == nil && seq != nil {
		return fmt.Errorf("put row %s: insert over an existing row", row.Key)
	}
	if old != nil && seq == nil {
		return fmt.Errorf("put row %s: no stored row to update", row.Key)
	}
	// Both checks come before the first write: a refused row leaves the
	// transaction as it was (no rollback), and with the log each repeats
	// a lookup the claim flow just made, answered without a search
	// (overlayBucket.Get) while nothing was written in between.
	lids := t.bucket(bucketLocalIDs)
	lidMoves := old == nil || old.MetadataLocalID != row.MetadataLocalID
	if lidMoves {
		if _, cur, ok := splitLidValue(lids.Get([]byte(row.MetadataLocalID))); ok && !bytes.Equal(cur, rk) {
			return fmt.Errorf("%w: local id in use", ledger.ErrFingerprintMismatch)
		}
	}
	t.writes++
	if old == nil {
		n, err := rows.NextSequence()
		if err != nil {
			return fmt.Errorf("put row: %w", err)
		}
		seq = seqKey(n)
	} else {
		seq = bytes.Clone(seq) // bbolt's memory until the next write
	}
	if err := rows.Put(seq, v); err != nil {
		return fmt.Errorf("put row: %w", err)
	}
	if old == nil || old.Status != row.Status {
		meta := t.bucket(bucketMeta)
		if old != nil {
			if err := addCount(meta, old.Status, -1); err != nil {
				return fmt.Errorf("put row: %w", err)
			}
		}
		if err := addCount(meta, row.Status, 1); err != nil {
			return fmt.Errorf("put row: %w", err)
		}
	}

	if lidMoves {
		if old != nil {
			if err := lids.Delete([]byte(old.MetadataLocalID)); err != nil {
				return fmt.Errorf("put row: %w", err)
			}
		}
		if err := lids.Put([]byte(row.MetadataLocalID), lidValue(seq, rk)); err != nil {
			return fmt.Errorf("put row: %w", err)
		}
	}
	if old == nil && keyIndexed(&row) {
		if err := t.bucket(bucketKeys).Put(keysKey(row.Key, row.Tenant), seq); err != nil {
			return fmt.Errorf("put row: %w", err)
		}
	}

	due := t.bucket(bucketDue)
	var newDue []byte
	if row.Status.Open() {
		newDue = dueKey(&row)
	}
	if old != nil && old.Status.Open() {
		if oldDue := dueKey(old); !bytes.Equal(oldDue, newDue) {
			if err := due.Delete(oldDue); err != nil {
				return fmt.Errorf("put row: %w", err)
			}
		} else {
			newDue = nil // in place already; a Put would only dirty a page
		}
	}
	if newDue != nil {
		if err := due.Put(newDue, nil); err != nil {
			return fmt.Errorf("put row: %w", err)
		}
	}

	if err := t.putApprovalIndexes(old, &row, rk); err != nil {
		return fmt.Errorf("put row: %w", err)
	}
	if err := t.putRetentionIndexes(old, &row); err != nil {
		return fmt.Errorf("put row: %w", err)
	}

	bt := t.bucket(bucketByTime)
	newBT := byTimeKey(&row)
	if old != nil {
		if oldBT := byTimeKey(old); !bytes.Equal(oldBT, newBT) {
			if err := bt.Delete(oldBT); err != nil {
				return fmt.Errorf("put row: %w", err)
			}
		} else {
			return nil
		}
	}
	if err := bt.Put(newBT, nil); err != nil {
		return fmt.Errorf("put row: %w", err)
	}
	return nil
}

// AppendOutbox writes e at the outbox bucket's next sequence. The sequence
// lives in the bucket header, so a rolled-back group gives its numbers back
// and commit order is sequence order.
func (t *boltTx) AppendOutbox(e ledger.Event) error {
	ob := t.bucket(bucketOutbox)
	t.writes++
	seq, err := ob.NextSequence()
	if err != nil {
		return fmt.Errorf("append outbox: %w", err)
	}
	v, err := marshal(e)
	if err != nil {
		return fmt.Errorf("append outbox: %w", err)
	}
	if err := ob.Put(seqKey(seq), v); err != nil {
		return fmt.Errorf("append outbox: %w", err)
	}
	if !t.wakeSet && t.store != nil {
		// OnCommit runs only if this bbolt transaction commits, so a
		// rolled-back group never wakes the relay for records it lost.
		// (With the log, the committer wakes it after the group's record
		// is durable.)
		t.wakeSet = true
		if !t.wal {
			t.tx.OnCommit(t.store.signalOutbox)
		}
	}
	return nil
}

// GetInbox returns what the inbox remembers of a vendor event.
func (t *boltTx) GetInbox(vendor, eventID string) (ledger.InboxRecord, error) {
	v := t.bucket(bucketInbox).Get(inboxKey(vendor, eventID))
	if v == nil {
		return ledger.InboxRecord{}, ledger.ErrNotFound
	}
	return decodeInbox(v)
}

func decodeInbox(v []byte) (ledger.InboxRecord, error) {
	var rec ledger.InboxRecord
	if err := unmarshal(v, &rec); err != nil {
		return ledger.InboxRecord{}, fmt.Errorf("decode inbox record: %w", err)
	}
	return rec, nil
}

// PutInbox records a vendor event id and keeps inbox_by_time in step, so
// PruneInbox walks only what it removes.
func (t *boltTx) PutInbox(vendor, eventID string, rec ledger.InboxRecord) error {
	ik := inboxKey(vendor, eventID)
	in := t.bucket(bucketInbox)
	byTime := t.bucket(bucketInboxByTime)
	v, err := marshal(rec)
	if err != nil {
		return fmt.Errorf("put inbox: %w", err)
	}
	newBT := inboxByTimeKey(rec.FirstSeen, ik)
	if cur := in.Get(ik); cur != nil {
		old, err := decodeInbox(cur)
		if err != nil {
			return err
		}
		if oldBT := inboxByTimeKey(old.FirstSeen, ik); !bytes.Equal(oldBT, newBT) {
			t.writes++
			if err := byTime.Delete(oldBT); err != nil {
				return fmt.Errorf("put inbox: %w", err)
			}
		}
	}
	t.writes++
	if err := in.Put(ik, v); err != nil {
		return fmt.Errorf("put inbox: %w", err)
	}
	if err := byTime.Put(newBT, nil); err != nil {
		return fmt.Errorf("put inbox: %w", err)
	}
	return nil
}

// Orphans returns the deliveries parked under localID, oldest first (the
// key orders them by vendor and event id, so they are sorted by At here).
func (t *boltTx) Orphans(localID string) ([]ledger.Delivery, error) {
	prefix := orphanPrefix(localID)
	var out []ledger.Delivery
	c := t.bucket(bucketOrphans).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var d ledger.Delivery
		if err := unmarshal(v, &d); err != nil {
			return nil, fmt.Errorf("decode orphan: %w", err)
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// PutOrphan parks a delivery under its local id; a redelivery of the same
// event replaces itself.
func (t *boltTx) PutOrphan(d ledger.Delivery) error {
	if d.LocalID == "" {
		return errors.New("put orphan: no local id")
	}
	v, err := marshal(d)
	if err != nil {
		return fmt.Errorf("put orphan: %w", err)
	}
	t.writes++
	if err := t.bucket(bucketOrphans).Put(orphanKey(d), v); err != nil {
		return fmt.Errorf("put orphan: %w", err)
	}
	return nil
}

// DeleteOrphans removes every delivery parked under localID. Keys are
// collected first: deleting under a live bbolt cursor skips entries.
func (t *boltTx) DeleteOrphans(localID string) error {
	prefix := orphanPrefix(localID)
	b := t.bucket(bucketOrphans)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, cloneBytes(k))
	}
	if len(keys) > 0 {
		t.writes++
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete orphans: %w", err)
		}
	}
	return nil
}

// OrphanLocalIDs implements ledger.Tx. A key is local id \x00 vendor \x00
// event id, so after each local id the cursor seeks past all of its keys
// (to local id \x01: local ids are printable ASCII, above \x01).
func (t *boltTx) OrphanLocalIDs(after string, limit int) ([]string, error) {
	c := t.bucket(bucketOrphans).Cursor()
	past := func(lid []byte) []byte { return append(append(make([]byte, 0, len(lid)+1), lid...), sep+1) }
	k, _ := c.First()
	if after != "" {
		k, _ = c.Seek(past([]byte(after)))
	}
	var out []string
	for k != nil && len(out) < limit {
		i := bytes.IndexByte(k, sep)
		if i < 0 {
			return nil, fmt.Errorf("orphan key %q has no separator", k)
		}
		out = append(out, string(k[:i]))
		k, _ = c.Seek(past(k[:i]))
	}
	return out, nil
}
