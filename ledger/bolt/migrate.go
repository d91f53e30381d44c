package bolt

import (
	"bytes"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The migration from schema 2 (rows keyed tenant \x00 key, hash-ordered)
// to schema 3 (rows keyed by sequence; rowindex.go) runs in Open, after
// a log left by the old build was replayed into the old layout (the log's
// records name buckets by index, and the old rows bucket keeps index 0)
// and before anything else reads the file.
//
// It runs in chunks, because one bbolt transaction holds its dirty pages
// in memory until it commits (a million rows are 2 GB of pages): each
// chunk moves the first rows of the old bucket to the new one — a
// sequence each, in the old key order — rewrites their local_ids and keys
// entries to carry the sequence, and deletes them from the old bucket, all
// in one transaction. A SIGKILL between chunks leaves a file whose every
// row is in exactly one of the two buckets with matching index entries;
// the next Open resumes. The first chunk stamps schema version 3 and the
// migrating marker, so an older build refuses the file from then on (it
// would read half of the rows); the last deletes the old bucket and the
// marker.

// metaMigrating marks a file whose rows are being moved to schema 3.
var metaMigrating = []byte("migrating")

// defaultMigrateChunkBytes bounds the row bytes one migration transaction
// moves (about 4,500 rows of 1.8 KB: some 40 MB of dirty pages with their
// local_ids leaves).
const defaultMigrateChunkBytes = 8 << 20

// migrateRows moves every row of the schema-2 bucket to the schema-3
// layout, chunk by chunk, calling hook("migrate-chunk") after each chunk
// committed (the crash test kills the process there). A schema-3 file
// with no migration under way costs one read transaction.
func migrateRows(db *bolt.DB, chunkBytes int, logger *slog.Logger, hook func(string)) error {
	if chunkBytes <= 0 {
		chunkBytes = defaultMigrateChunkBytes
	}
	var pending bool
	if err := db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		pending = tx.Bucket(bucketRowsV2) != nil || m.Get(metaMigrating) != nil ||
			string(m.Get(metaSchemaVersion)) != strconv.Itoa(schemaVersion)
		return nil
	}); err != nil {
		return err
	}
	if !pending {
		return nil
	}
	// Said before the first chunk: a large file takes a while (about a
	// minute per million rows) and the node serves nothing until it is done.
	logger.Info("bolt: migrating the rows to sequence order (once; an older build refuses the file afterwards)",
		"schema_version", schemaVersion)
	start := time.Now()
	var moved, chunks int
	for {
		var n int
		var done bool
		err := db.Update(func(tx *bolt.Tx) error {
			var err error
			n, done, err = migrateChunk(tx, chunkBytes)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate the rows to schema %d (%d moved): %w", schemaVersion, moved, err)
		}
		moved += n
		chunks++
		if hook != nil && n > 0 {
			hook("migrate-chunk")
		}
		if done {
			break
		}
	}
	logger.Info("bolt: rows migrated to sequence order", "schema_version", schemaVersion, "rows", moved,
		"transactions", chunks, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// migrateChunk moves up to chunkBytes of rows (at least one) in tx and
// reports how many, and whether the old bucket is now gone.
func migrateChunk(tx *bolt.Tx, chunkBytes int) (int, bool, error) {
	m := tx.Bucket(bucketMeta)
	if err := m.Put(metaSchemaVersion, []byte(strconv.Itoa(schemaVersion))); err != nil {
		return 0, false, err
	}
	old := tx.Bucket(bucketRowsV2)
	if old == nil {
		return 0, true, m.Delete(metaMigrating)
	}
	if err := m.Put(metaMigrating, []byte("1")); err != nil {
		return 0, false, err
	}
	rows, lids, keys := packRows(tx.Bucket(bucketRows), bucketRows), tx.Bucket(bucketLocalIDs), tx.Bucket(bucketKeys)
	var moved [][]byte
	size := 0
	c := old.Cursor()
	for k, v := c.First(); k != nil && size < chunkBytes; k, v = c.Next() {
		r, err := decodeRow(v)
		if err != nil {
			return 0, false, fmt.Errorf("row %q: %w", k, err)
		}
		if !bytes.Equal(k, rowKey(r.Tenant, r.Key)) {
			return 0, false, fmt.Errorf("row %q: holds tenant %q key %q", k, r.Tenant, r.Key)
		}
		// The old entry must name this row: overwriting another row's
		// would lose it.
		lid := []byte(r.MetadataLocalID)
		if cur := lids.Get(lid); !bytes.Equal(cur, k) {
			return 0, false, fmt.Errorf("row %q: local id %s points to %q", k, lid, cur)
		}
		n, err := rows.NextSequence()
		if err != nil {
			return 0, false, err
		}
		seq := seqKey(n)
		rk := cloneBytes(k)
		if err := rows.Put(seq, cloneBytes(v)); err != nil {
			return 0, false, err
		}
		if err := lids.Put(lid, lidValue(seq, rk)); err != nil {
			return 0, false, err
		}
		if keyIndexed(&r) {
			if err := keys.Put(keysKey(r.Key, r.Tenant), seq); err != nil {
				return 0, false, err
			}
		}
		moved = append(moved, rk)
		size += len(v)
	}
	// Deleted after the walk: deleting under a live cursor skips entries.
	for _, k := range moved {
		if err := old.Delete(k); err != nil {
			return 0, false, err
		}
	}
	if k, _ := old.Cursor().First(); k != nil {
		return len(moved), false, nil
	}
	if err := tx.DeleteBucket(bucketRowsV2); err != nil {
		return 0, false, err
	}
	return len(moved), true, m.Delete(metaMigrating)
}
