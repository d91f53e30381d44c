package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/agentledger/reconciler/ledger"
)

// Options configure Open. The zero value is usable.
type Options struct {
	// Policy holds the timings of the rules (zero fields take ledger's defaults).
	Policy ledger.Policy
	// LockTimeout bounds the wait for the file lock (default 1 s), so a
	// second process opening the same file fails fast with ErrLocked.
	LockTimeout time.Duration
	// Logger receives open/close and commit-failure records (default: discard).
	Logger *slog.Logger
	// MaxGroup caps how many writes one group commit carries (default 512).
	MaxGroup int
	// InitialMmapSize is the initial memory map of the file in bytes
	// (default 1 GiB: address space only). bbolt remaps when the file
	// outgrows the map, and a remap waits for every open read transaction,
	// so a map larger than the file keeps writers from stalling on readers.
	InitialMmapSize int
	// FreelistSync writes bbolt's freelist on every commit. Off by default:
	// it costs a page write per commit, and the freelist is rebuilt by a scan
	// on open instead (a few hundred ms per GiB).
	FreelistSync bool
	// UnsafeNoSync skips bbolt's two fdatasyncs per commit. For measuring
	// only (httpload -unsafe-nosync: what the HTTP path costs without the
	// disk): an acknowledged write can be lost, and a power cut can leave
	// a file that does not open. serve has no setting for it.
	UnsafeNoSync bool
	// NoWAL turns the write-ahead log off (wal.go, on by default): every
	// group is then its own bbolt commit (two fdatasyncs and its page
	// writes before the answer), as before the log existed. With the log,
	// a group is acknowledged once its record is fdatasynced in the log,
	// and bbolt commits in large batches off the callers' path.
	NoWAL bool
	// WALSegmentSize is where the log starts a new file (default 32 MiB).
	WALSegmentSize int64
	// WALFlushInterval is how often bbolt takes the log's writes in one
	// batch commit (default 200 ms); WALFlushBytes starts one sooner when
	// that much waits (default 1 MiB).
	WALFlushInterval time.Duration
	WALFlushBytes    int

	// openFile replaces os.OpenFile (tests inject I/O failures with it).
	openFile func(string, int, os.FileMode) (*os.File, error)
	// walFS replaces the log's file layer (the power-loss test).
	walFS walFS
	// crashHook is called at named points of the flush (the crash tests
	// kill the process there); afterBoltCommit after each batch commit
	// into bbolt returned (the power-loss test copies the file then).
	crashHook       func(point string)
	afterBoltCommit func()
	// migrateChunkBytes bounds one transaction of the schema-3 migration
	// (default defaultMigrateChunkBytes; the crash test makes it small).
	migrateChunkBytes int
}

// Defaults of Options.
const (
	DefaultLockTimeout     = time.Second
	DefaultMaxGroup        = 512
	DefaultInitialMmapSize = 1 << 30
)

// Errors of Open.
var (
	// ErrLocked means another process holds the file.
	ErrLocked = errors.New("locked by another process")
	// ErrSchemaTooNew means the file was written by a newer build.
	ErrSchemaTooNew = errors.New("schema version newer than this build")
)

// errClosed is what every method returns after Close.
var errClosed = fmt.Errorf("bolt: store closed: %w", ledger.ErrUnavailable)

// Store is the bbolt-backed ledger.Store. It is safe for concurrent use;
// writes are serialised by one committer goroutine (see the package doc).
type Store struct {
	// Flows runs the shared ledger flows in group commits (Claim, Report,
	// Apply, Ingest, Escalate, Reschedule).
	ledger.Flows

	db        *bolt.DB
	path      string
	policy    ledger.Policy
	logger    *slog.Logger
	maxGroup  int
	maxYields int

	mu     sync.Mutex
	queue  []*op
	closed bool

	wake     chan struct{}
	loopDone chan struct{}
	notify   chan struct{}

	closeOnce sync.Once
	closeErr  error

	// wal is the write-ahead log (nil with Options.NoWAL).
	wal             *walState
	crashHook       func(string)
	afterBoltCommit func()

	// health is whether commits fail (fault.go).
	health writeHealth

	metrics struct {
		groups, ops, rollbacks, readOnly atomic.Uint64
		// runNanos is time spent running ops, commitNanos time spent in
		// bbolt's commit (spill, page writes, two fdatasyncs).
		runNanos, commitNanos atomic.Int64
		// preEncoded counts inserts written with the bytes their caller
		// encoded (preencode.go).
		preEncoded atomic.Uint64
		// preDecoded counts joined rows read with the decoding their
		// caller made (predecode.go).
		preDecoded atomic.Uint64
	}
}

var _ ledger.Store = (*Store)(nil)

// Open opens (creating it and its directory if needed) the ledger file at
// path and starts the committer. A file held by another process fails after
// LockTimeout with ErrLocked; a file of a newer schema fails with
// ErrSchemaTooNew.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.MaxGroup <= 0 {
		opts.MaxGroup = DefaultMaxGroup
	}
	if opts.InitialMmapSize <= 0 {
		opts.InitialMmapSize = DefaultInitialMmapSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// The data directory of a first start may not exist yet.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         opts.LockTimeout,
		NoFreelistSync:  !opts.FreelistSync,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: opts.InitialMmapSize,
		OpenFile:        opts.openFile,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w (waited %s)", path, ErrLocked, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.NoSync = opts.UnsafeNoSync
	if err := initSchema(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fs := opts.walFS
	if fs == nil {
		fs = osFS{}
	}
	// A file last written with the log may hold acknowledged writes only
	// there, whichever way it is opened now. A log of a schema-2 build is
	// replayed into the old layout, which the migration then moves.
	last, err := recoverLog(db, fs, walDir(path))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := migrateRows(db, opts.migrateChunkBytes, opts.Logger, opts.crashHook); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := completeIndexes(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{
		db: db, path: path, policy: opts.Policy, logger: opts.Logger,
		maxGroup: opts.MaxGroup, maxYields: 32,
		wake:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		notify:   make(chan struct{}, 1),

		crashHook: opts.crashHook, afterBoltCommit: opts.afterBoltCommit,
	}
	if !opts.NoWAL {
		if s.wal, err = openWAL(fs, path, last, opts); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		go s.flushLoop()
	} else if err := removeLogDir(fs, walDir(path)); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: remove the replayed write-ahead log: %w", path, err)
	}
	s.Flows = ledger.Flows{Policy: opts.Policy, Update: func(ctx context.Context, fn func(ledger.Tx) error) error {
		pre := preRowFrom(ctx)      // a claim's row, encoded by Claim (preencode.go)
		preRead := preReadFrom(ctx) // a delivery's row, decoded by Ingest (predecode.go)
		return s.write(ctx, func(tx *boltTx) error {
			tx.pre, tx.preRead = pre, preRead
			defer func() { tx.pre, tx.preRead = nil, nil }()
			return fn(tx)
		})
	}}
	go s.commitLoop()
	s.logger.Info("bolt: store opened", "path", path, "schema_version", schemaVersion, "wal", !opts.NoWAL, "wal_index", last)
	return s, nil
}

// initSchema refuses a file of a newer schema, then creates the buckets and
// stamps the version of a new file (an older file's is stamped by the
// migration, migrate.go, once its log is replayed). The check runs in a
// read transaction first so a newer file is never written to.
func initSchema(db *bolt.DB) error {
	readVersion := func(tx *bolt.Tx) (int, bool, error) {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return 0, false, nil
		}
		v := m.Get(metaSchemaVersion)
		if v == nil {
			return 0, false, nil
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return 0, false, fmt.Errorf("schema version %q: %w", v, err)
		}
		return n, true, nil
	}
	err := db.View(func(tx *bolt.Tx) error {
		n, ok, err := readVersion(tx)
		if err != nil {
			return err
		}
		if ok && n > schemaVersion {
			return fmt.Errorf("%w: file has %d, this build reads up to %d", ErrSchemaTooNew, n, schemaVersion)
		}
		if !ok && (tx.Bucket(bucketRowsV2) != nil || tx.Bucket(bucketRows) != nil) {
			return errors.New("rows without a schema version: not a reconciler ledger")
		}
		return nil
	})
	if err != nil {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		_, ok, err := readVersion(tx)
		if err != nil {
			return err
		}
		for _, name := range allBuckets {
			if bytes.Equal(name, bucketRowsV2) {
				continue // the old layout's; only an old file has it
			}
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		if ok {
			return nil
		}
		// A new file: what a migrated one holds once done.
		m := tx.Bucket(bucketMeta)
		for _, kv := range [][2][]byte{{metaSchemaVersion, []byte(strconv.Itoa(schemaVersion))}, {metaCounted, []byte("1")}, {metaRetentionIndexed, []byte("1")}} {
			if err := m.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// completeIndexes counts the rows and builds the retention indexes of a
// file written before they existed (one scan each, once), after the
// migration: they walk the schema-3 rows.
func completeIndexes(db *bolt.DB) error {
	var done bool
	if err := db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		done = m.Get(metaCounted) != nil && m.Get(metaRetentionIndexed) != nil
		return nil
	}); err != nil || done {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		if err := countRowsOnce(tx); err != nil {
			return err
		}
		return indexRetentionOnce(tx)
	})
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Close lets the committer finish every write queued before it, stops it
// and closes the file. Later calls to any method return ErrUnavailable;
// Close itself is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		<-s.loopDone
		if s.wal != nil {
			if err := s.closeWAL(); err != nil {
				s.closeErr = fmt.Errorf("close %s: write-ahead log: %w", s.path, err)
			}
		}
		if err := s.db.Close(); err != nil {
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("close %s: %w", s.path, err))
		}
		s.logger.Info("bolt: store closed", "path", s.path, "groups", s.metrics.groups.Load(), "ops", s.metrics.ops.Load())
	})
	return s.closeErr
}

// Stats are the committer's counters since Open.
type Stats struct {
	// Groups is the number of groups run, Ops the ops they carried
	// (Ops/Groups is the mean group size), Rollbacks the groups that re-ran
	// without a failed op, ReadOnly the groups that wrote nothing and so
	// ended without a commit.
	Groups, Ops, Rollbacks, ReadOnly uint64
	// RunTime is the time the committer spent running ops, CommitTime the
	// time bbolt spent committing them (page writes and fdatasyncs).
	RunTime, CommitTime time.Duration
}

// Stats returns the committer's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Groups: s.metrics.groups.Load(), Ops: s.metrics.ops.Load(), Rollbacks: s.metrics.rollbacks.Load(), ReadOnly: s.metrics.readOnly.Load(),
		RunTime: time.Duration(s.metrics.runNanos.Load()), CommitTime: time.Duration(s.metrics.commitNanos.Load()),
	}
}

// signalOutbox wakes the relay without ever blocking the committer; one
// buffered value stands for any number of commits.
func (s *Store) signalOutbox() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Notify returns the channel signalled after a commit that appended outbox records.
func (s *Store) Notify() <-chan struct{} { return s.notify }

// unavailable wraps a bbolt failure (I/O, a closed file) as ErrUnavailable.
func unavailable(op string, err error) error {
	return fmt.Errorf("bolt: %s: %w: %w", op, ledger.ErrUnavailable, err)
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// view runs fn in a read transaction. Reads do not go through the
// committer: bbolt gives each one a consistent snapshot of the last commit.
func (s *Store) view(ctx context.Context, fn func(*boltTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return errClosed
	}
	if s.wal != nil {
		return s.viewWAL(fn)
	}
	return s.viewBolt(ctx, fn)
}

// viewBolt runs fn in a bbolt read transaction without the log's layers:
// bbolt's own last commit (all of the store without the log; with it,
// what the flusher has committed: Backup after Flush).
func (s *Store) viewBolt(ctx context.Context, fn func(*boltTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return errClosed
	}
	var fnErr error
	err := s.db.View(func(btx *bolt.Tx) error {
		fnErr = fn(newTx(nil, btx))
		return nil
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
			return errClosed
		}
		return unavailable("read", err)
	}
	return fnErr
}
