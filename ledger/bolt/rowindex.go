package bolt

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// Rows are keyed by be64(sequence) (schema 3), so a claim's insert appends
// to the rows B+tree instead of dirtying a random leaf of it. A row is
// found by tenant and key through one of two indexes, whose values carry
// the sequence:
//
//	local_ids  metadata_local_id → be64(seq) ‖ tenant \x00 key
//	keys       key \x00 tenant   → be64(seq)   (keyIndexed rows only)
//
// A minted key's local id is its key's own prefix (ledger.LocalID), so for
// those rows (every claim without a business key) local_ids serves as the
// row index too: one random small-entry insert per claim. A business key
// (or a minted-shaped key whose local id is not its prefix) has its entry
// in keys, which it needed anyway for TenantsOfKey. Every other index holds
// tenant \x00 key and resolves through these.

// rowsFillPercent is how full bbolt packs the rows bucket's pages when it
// splits them. Its default (0.5) suits random inserts; rows are appended,
// so at 0.5 every leaf would stay half empty (two 760-byte rows per 4 KiB
// page in the growth test). A row that grows in place (a report) splits
// its page as before.
const rowsFillPercent = 1.0

// packRows sets the fill of b when it is the rows bucket (a handle's
// FillPercent lasts for its transaction).
func packRows(b *bolt.Bucket, name []byte) *bolt.Bucket {
	if b != nil && bytes.Equal(name, bucketRows) {
		b.FillPercent = rowsFillPercent
	}
	return b
}

// lidValue is local_ids' value: be64(seq) ‖ tenant \x00 key.
func lidValue(seq, rk []byte) []byte {
	return append(append(make([]byte, 0, len(seq)+len(rk)), seq...), rk...)
}

// splitLidValue splits a local_ids value into the row's sequence key and
// its tenant \x00 key.
func splitLidValue(v []byte) (seq, rk []byte, ok bool) {
	if len(v) < 8+2 {
		return nil, nil, false
	}
	return v[:8], v[8:], true
}

// rowSeq returns the sequence key (be64) of the row stored under tenant
// and key, nil if there is none. The slice may be bbolt's: valid for the
// transaction only.
func (t *boltTx) rowSeq(tenant, key string) []byte {
	rk := rowKey(tenant, key)
	if f := &t.found; f.ok && f.at == t.writes && bytes.Equal(f.rk, rk) {
		return f.seq
	}
	var seq []byte
	if ledger.IsMintedKey(key) {
		if s, got, ok := splitLidValue(t.bucket(bucketLocalIDs).Get([]byte(ledger.LocalID(tenant, key, true)))); ok && bytes.Equal(got, rk) {
			seq = s
		}
	}
	if seq == nil {
		if s := t.bucket(bucketKeys).Get(keysKey(key, tenant)); len(s) == 8 {
			seq = s
		}
	}
	if seq != nil {
		t.found = foundRow{rk: rk, seq: bytes.Clone(seq), at: t.writes, ok: true}
	}
	return seq
}

// foundRow is the last row rowSeq found, and the transaction's write
// count then: until the transaction writes again (PutRow and deleteRow
// count a write before they touch an index), asking for the same row
// again (an update's flow reads the row, then PutRow needs its sequence)
// is answered without searching local_ids or keys again.
type foundRow struct {
	rk, seq []byte
	at      int
	ok      bool
}

// rowValue returns the encoded row stored under tenant and key (nil: none).
func (t *boltTx) rowValue(tenant, key string) ([]byte, error) {
	seq := t.rowSeq(tenant, key)
	if seq == nil {
		return nil, nil
	}
	v := t.bucket(bucketRows).Get(seq)
	if v == nil {
		return nil, fmt.Errorf("row %s/%s: index names sequence %x, which holds no row", tenant, key, seq)
	}
	return v, nil
}

// rowValueRK is rowValue for an index entry's tenant \x00 key.
func (t *boltTx) rowValueRK(rk []byte) ([]byte, error) {
	tenant, key, ok := splitRowKey(rk)
	if !ok {
		return nil, fmt.Errorf("row key %q: no separator", rk)
	}
	return t.rowValue(tenant, key)
}
