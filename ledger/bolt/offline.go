package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/agentledger/reconciler/ledger"
)

// Offline operations on a file no node has open (reconciler restore,
// compact, and the check of a backup): each takes bbolt's file lock, so a
// running node (which holds it) makes them fail with ErrLocked.

// FileReport is what CheckFile found in a ledger file.
type FileReport struct {
	// Rows and Outbox count the rows and the outbox records (events a
	// node started on this file publishes, again if they were published
	// after the copy was taken).
	Rows, Outbox int64
	// Bytes is the file's size.
	Bytes int64
	// NewestUpdate is the latest updated_at of any row: about when the
	// copy was taken, on a busy node. OldestEvent is the time of the
	// oldest outbox record's event (zero: none).
	NewestUpdate, OldestEvent time.Time
	// Invariants is false for a file of an older schema, whose indexes
	// Open completes: bbolt's check ran, the ledger's runs on open.
	Invariants bool
}

// openOffline opens path with bbolt alone, failing fast on a held lock.
func openOffline(path string, readOnly bool) (*bolt.DB, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no ledger file at %s: %w", path, err)
	} else if err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: DefaultLockTimeout, ReadOnly: readOnly, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%s: %w (a running node holds it)", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// CheckFile checks a ledger file without changing it: bbolt's own
// consistency check (every page reachable once, no page both free and in
// use), the schema version, and the ledger's invariants (CheckConsistency:
// every index agrees with the rows).
func CheckFile(ctx context.Context, path string) (FileReport, error) {
	var rep FileReport
	if err := checkLength(path); err != nil {
		return rep, fmt.Errorf("check %s: %w", path, err)
	}
	db, err := openOffline(path, true)
	if err != nil {
		return rep, err
	}
	defer db.Close()
	err = db.View(func(btx *bolt.Tx) error {
		rep.Bytes = btx.Size()
		// bbolt's check panics (in a goroutine of its own, where nothing
		// can recover) on a page that is not what its parent says; a walk
		// of every key here reads the same pages and turns that into an
		// error first.
		if err := walkAll(btx); err != nil {
			return err
		}
		var problems []error
		for err := range btx.Check() {
			if len(problems) < maxProblems {
				problems = append(problems, err)
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("bbolt consistency check: %w", errors.Join(problems...))
		}
		m := btx.Bucket(bucketMeta)
		if m == nil || btx.Bucket(bucketRows) == nil && btx.Bucket(bucketRowsV2) == nil {
			return errors.New("not a reconciler ledger (no meta or rows bucket)")
		}
		v, err := strconv.Atoi(string(m.Get(metaSchemaVersion)))
		if err != nil {
			return fmt.Errorf("schema version %q: %w", m.Get(metaSchemaVersion), err)
		}
		if v > schemaVersion {
			return fmt.Errorf("%w: file has %d, this build reads up to %d", ErrSchemaTooNew, v, schemaVersion)
		}
		// A file of schema 2 (or one whose migration to 3 was cut short)
		// holds rows in the old bucket; Open migrates it.
		rep.Invariants = v == schemaVersion && m.Get(metaCounted) != nil && m.Get(metaRetentionIndexed) != nil &&
			m.Get(metaMigrating) == nil && btx.Bucket(bucketRowsV2) == nil
		for _, name := range allBuckets {
			if btx.Bucket(name) == nil && !bytes.Equal(name, bucketRowsV2) {
				rep.Invariants = false
			}
		}
		for _, name := range [][]byte{bucketRowsV2, bucketRows} {
			b := btx.Bucket(name)
			if b == nil {
				continue
			}
			if err := b.ForEach(func(_, v []byte) error {
				rep.Rows++
				r, err := decodeRow(v)
				if err != nil {
					return err
				}
				if r.UpdatedAt.After(rep.NewestUpdate) {
					rep.NewestUpdate = r.UpdatedAt
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if ob := btx.Bucket(bucketOutbox); ob != nil {
			c := ob.Cursor()
			if k, v := c.First(); k != nil {
				var e ledger.Event
				if err := unmarshal(v, &e); err != nil {
					return fmt.Errorf("outbox %x: %w", k, err)
				}
				rep.OldestEvent = e.At
			}
			rep.Outbox = int64(ob.Stats().KeyN)
		}
		if !rep.Invariants {
			return nil
		}
		problems, err = newTx(nil, btx).checkConsistency(ctx)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("ledger invariants: %w", errors.Join(problems...))
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("check %s: %w", path, err)
	}
	return rep, nil
}

// walkAll reads every key of every bucket, recovering bbolt's panic on a
// damaged page.
func walkAll(btx *bolt.Tx) (err error) {
	// A fault reading the map (a page past the file's end) panics here,
	// where it is recovered, instead of killing the process.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt consistency check: damaged page: %v", r)
		}
	}()
	// Keys out of order make bbolt's check panic where nothing recovers
	// (its free-page scan), so they are found here first.
	var walk func(name []byte, b *bolt.Bucket) error
	walk = func(name []byte, b *bolt.Bucket) error {
		var prev []byte
		return b.ForEach(func(k, v []byte) error {
			if prev != nil && bytes.Compare(k, prev) <= 0 {
				return fmt.Errorf("bbolt consistency check: bucket %q: key %x after %x: keys out of order", name, k, prev)
			}
			prev = append(prev[:0], k...)
			if v == nil {
				if nb := b.Bucket(k); nb != nil {
					return walk(k, nb)
				}
			}
			return nil
		})
	}
	return btx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(name, b) })
}

// Compact rewrites the ledger file at path into a new file beside it
// (bbolt's Compact: every bucket, key and sequence, with no free pages),
// fsyncs it, checks it (CheckFileIsolated) and renames it over path, all while
// holding the old file's lock, so no node can open either meanwhile. It
// returns the file's sizes before and after, in bytes. A crash at any point leaves path
// as it was or as compacted, and at worst a stray *.compact-* file.
func Compact(ctx context.Context, path string) (before, after int64, err error) {
	src, err := openOffline(path, false)
	if err != nil {
		return 0, 0, err
	}
	defer src.Close()
	if st, err := os.Stat(path); err == nil {
		before = st.Size()
	}
	if err := src.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil || tx.Bucket(bucketRows) == nil && tx.Bucket(bucketRowsV2) == nil {
			return errors.New("not a reconciler ledger (no meta or rows bucket)")
		}
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	tmp := fmt.Sprintf("%s.compact-%d", path, os.Getpid())
	_ = os.Remove(tmp)
	defer os.Remove(tmp) // gone after the rename; a leftover otherwise
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	dst.NoSync = true // one fsync at the end, not one per compaction transaction
	if err := ctx.Err(); err != nil {
		_ = dst.Close()
		return 0, 0, err
	}
	if err := bolt.Compact(dst, src, 64<<20); err != nil {
		_ = dst.Close()
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return 0, 0, fmt.Errorf("compact %s: fsync: %w", tmp, err)
	}
	if err := dst.Close(); err != nil {
		return 0, 0, fmt.Errorf("compact %s: %w", tmp, err)
	}
	if _, err := CheckFileIsolated(ctx, tmp); err != nil {
		return 0, 0, fmt.Errorf("compact %s: the new file fails its check, the old one is kept: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	return before, st.Size(), nil
}

// SyncDir fsyncs a directory, making a rename or a new entry in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// Held reports whether a node holds the ledger file at path (its lock).
// A missing file is not held.
func Held(path string) (bool, error) {
	db, err := openOffline(path, true)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case errors.Is(err, ErrLocked):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, db.Close()
}

// ErrExists: restore would replace an existing ledger file and was not
// told to (--force).
var ErrExists = errors.New("a ledger file exists there")

// Restore checks the copy at from (CheckFileIsolated) before it writes anything,
// then copies it to path through a temporary file beside path (fsynced,
// renamed, the directory fsynced). An existing file at path is replaced
// only with force, and never while a node holds it: Restore holds that
// file's lock through the rename. It returns the copy's report.
func Restore(ctx context.Context, from, path string, force bool) (FileReport, error) {
	rep, err := CheckFileIsolated(ctx, from)
	if err != nil {
		return rep, fmt.Errorf("restore: the copy fails its check, nothing written: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	unlock, err := lockExisting(path)
	if err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil && !force {
		return rep, fmt.Errorf("restore: %s: %w (use --force to replace it)", path, ErrExists)
	}
	tmp := fmt.Sprintf("%s.restore-%d", path, os.Getpid())
	defer os.Remove(tmp)
	if err := copyFile(ctx, from, tmp); err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	// The replaced file's write-ahead log holds records of that file's
	// history: replayed onto the copy they would corrupt it. It goes
	// before the copy takes the name (a crash between leaves the old file
	// without its log's last writes, which --force was replacing anyway).
	if err := removeLogDir(osFS{}, walDir(path)); err != nil {
		return rep, fmt.Errorf("restore: remove %s: %w", walDir(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	return rep, nil
}

// copyFile copies from to a new file to, fsynced.
func copyFile(ctx context.Context, from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(ctxWriter{ctx, out}, in); err != nil {
		_ = out.Close()
		return fmt.Errorf("copy to %s: %w", to, err)
	}
	if err := out.Sync(); err != nil {
		_ = out.Close()
		return fmt.Errorf("fsync %s: %w", to, err)
	}
	return out.Close()
}
