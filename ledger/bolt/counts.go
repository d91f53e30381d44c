package bolt

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/agentledger/reconciler/ledger"
)

// Row counts per status live in the meta bucket and move in the same
// transaction as the rows, so reconciler_rows{status} is read in O(1)
// instead of scanning every row on every scrape. A file written before the
// counts existed is counted once, by a scan, when it is opened.
var (
	metaCounted  = []byte("rows_counted")
	allStatuses  = ledger.Statuses()
	countKeyBase = "rows_"
)

func countKey(s ledger.Status) []byte { return []byte(countKeyBase + string(s)) }

func readCount(m kvBucket, s ledger.Status) int64 {
	v := m.Get(countKey(s))
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func addCount(m kvBucket, s ledger.Status, delta int64) error {
	n := readCount(m, s) + delta
	if n < 0 {
		return fmt.Errorf("row count of %s would go negative", s)
	}
	return m.Put(countKey(s), binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// countRowsOnce counts the rows of a file that has no counts yet.
func countRowsOnce(tx *bolt.Tx) error {
	m := tx.Bucket(bucketMeta)
	if m.Get(metaCounted) != nil {
		return nil
	}
	counts := map[ledger.Status]int64{}
	err := tx.Bucket(bucketRows).ForEach(func(_, v []byte) error {
		r, err := decodeRow(v)
		if err != nil {
			return err
		}
		counts[r.Status]++
		return nil
	})
	if err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	for _, s := range allStatuses {
		if err := m.Put(countKey(s), binary.BigEndian.AppendUint64(nil, uint64(counts[s]))); err != nil {
			return err
		}
	}
	return m.Put(metaCounted, []byte("1"))
}

// CountRows returns how many rows hold each status.
func (s *Store) CountRows(ctx context.Context) (map[ledger.Status]int64, error) {
	out := make(map[ledger.Status]int64, len(allStatuses))
	err := s.view(ctx, func(tx *boltTx) error {
		m := tx.bucket(bucketMeta)
		for _, st := range allStatuses {
			out[st] = readCount(m, st)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count rows: %w", err)
	}
	return out, nil
}
