package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The write-ahead log in front of bbolt (on unless Options.NoWAL; the package doc's
// "Write-ahead log" section says why and how it stays durable).

// metaWALIndex is the meta key holding the last log index bbolt holds
// (etcd's consistent index): open replays only the records after it.
var metaWALIndex = []byte("wal_index")

// Defaults of the log's flushing into bbolt.
const (
	// DefaultWALFlushInterval is how often bbolt takes what the log holds
	// beyond it (etcd: 100 ms; longer here, as a larger batch dirties fewer
	// pages per write and this is a shared two-core box's disk).
	DefaultWALFlushInterval = 200 * time.Millisecond
	// DefaultWALFlushBytes starts a flush before the interval when this
	// much is waiting.
	DefaultWALFlushBytes = 1 << 20
	// walMaxPending is how much may wait for bbolt while a flush runs;
	// above it the committer waits for the flush (bounded memory).
	walMaxPending = 8 << 20
)

// walDir is the log directory of the file at path.
func walDir(path string) string { return path + ".wal" }

// walState is the store's log and the writes bbolt does not hold yet.
type walState struct {
	log        *wlog
	flushEvery time.Duration
	flushBytes int

	// active takes the committer's groups; only the committer writes it,
	// under mu (readers copy it under mu).
	active *layer

	mu sync.Mutex
	// frozen layers wait for (or are in) the flusher's bbolt commit,
	// oldest first; they are immutable.
	frozen []*layer
	// snap is readers' copy of active, valid while snapVer == activeVer.
	snap               *layer
	snapVer, activeVer uint64
	flushed            *sync.Cond // signalled when frozen shrinks
	// pending are the groups handed to the syncer, oldest first, until
	// the committer merges them (durable) into active.
	pending []*pendingGroup
	// held is the last log index bbolt holds; flushReq asks the committer
	// for a freeze now (Flush); closing ends Flush's wait.
	held     uint64
	flushReq bool
	closing  bool

	syncQ    chan syncJob
	syncDone chan struct{}
	// gen, poisoned, poisonGen: see syncJob.gen and mergeDurable.
	gen       uint64
	poisoned  bool
	poisonGen uint64
	// flushErr is the flusher's last failure (nil once a flush succeeds):
	// while it is set and the writes waiting for bbolt pass walMaxPending,
	// new groups fail with ErrUnavailable (a full disk answers 503s)
	// instead of waiting.
	flushErr error
	// logErr is set once by the syncer when the log fails (it fails every
	// later write until restart); WriteErr reports it.
	logErr atomic.Pointer[error]

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	flushes    uint64
	flushNanos int64
}

// readWALIndex returns the log index bbolt holds (0: none, a file from
// before the log).
func readWALIndex(db *bolt.DB) (uint64, error) {
	var n uint64
	err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(metaWALIndex); len(v) == 8 {
			n = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return n, err
}

// recoverLog replays the log after the index bbolt holds into bbolt (one
// commit that also records the new index) and returns the last index.
// It runs on every open, with the log or without: a file last written with
// the log may hold acknowledged writes only there.
func recoverLog(db *bolt.DB, fs walFS, dir string) (uint64, error) {
	held, err := readWALIndex(db)
	if err != nil {
		return 0, err
	}
	var payloads [][]byte
	last, err := replayLog(fs, dir, held, func(_ uint64, p []byte) error {
		payloads = append(payloads, p)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(payloads) == 0 {
		return last, nil
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, p := range payloads {
			if err := applyRecord(tx, p); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaWALIndex, binary.BigEndian.AppendUint64(nil, last))
	})
	if err != nil {
		return 0, fmt.Errorf("replay the write-ahead log: %w", err)
	}
	return last, nil
}

// applyRecord writes one record's mutations into a bbolt transaction.
func applyRecord(tx *bolt.Tx, p []byte) error {
	return decodeMutations(p, func(kind byte, bi int, k, v []byte, seq uint64) error {
		b := packRows(tx.Bucket(allBuckets[bi]), allBuckets[bi])
		if b == nil {
			return fmt.Errorf("bucket %s missing", allBuckets[bi])
		}
		switch kind {
		case mutPut:
			return b.Put(k, v)
		case mutDelete:
			return b.Delete(k)
		default:
			return b.SetSequence(seq)
		}
	})
}

// applyLayer writes a layer's writes into a bbolt transaction, each
// bucket's in key order.
func applyLayer(tx *bolt.Tx, l *layer) error {
	for i, m := range l.maps {
		if m == nil {
			continue
		}
		b := packRows(tx.Bucket(allBuckets[i]), allBuckets[i])
		var err error
		m.Scan(func(k string, e entry) bool {
			if e.del {
				err = b.Delete([]byte(k))
			} else {
				err = b.Put([]byte(k), e.v)
			}
			return err == nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", allBuckets[i], err)
		}
	}
	for i, ok := range l.seqSet {
		if ok {
			if err := tx.Bucket(allBuckets[i]).SetSequence(l.seq[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeLogDir removes the segments and directory of a log whose records
// bbolt holds (a store opened without the log).
func removeLogDir(fs walFS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := fs.Remove(dir + string(os.PathSeparator) + n); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// begin returns the layers a transaction sees (newest first) and a bbolt
// read transaction, taken together under mu so that the flusher's dropping
// of a layer bbolt now holds is never half seen. The committer sees every
// group it ran, durable or not (its next group decides on top of them; the
// syncer answers no caller before the groups before it are durable); a
// reader sees only durable groups.
func (w *walState) begin(db *bolt.DB, committer bool) ([]*layer, *bolt.Tx, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	layers := make([]*layer, 0, 2+len(w.pending)+len(w.frozen))
	if committer {
		layers = append(layers, nil) // [0] is the group's own layer
	}
	for i := len(w.pending) - 1; i >= 0; i-- {
		if p := w.pending[i]; committer || p.durable {
			layers = append(layers, p.l)
		}
	}
	if committer {
		layers = append(layers, w.active)
	} else {
		if w.snap == nil || w.snapVer != w.activeVer {
			w.snap, w.snapVer = w.active.snapshot(), w.activeVer
		}
		layers = append(layers, w.snap)
	}
	for i := len(w.frozen) - 1; i >= 0; i-- {
		layers = append(layers, w.frozen[i])
	}
	btx, err := db.Begin(false)
	return layers, btx, err
}

// pendingGroup is a group whose record the syncer has not made durable
// yet (or has, and the committer has not merged it into active yet).
type pendingGroup struct {
	l       *layer
	durable bool
	failed  bool
}

// syncJob is one group for the syncer: its layer (nil for a group that
// wrote nothing, which still waits for the groups before it), which the
// syncer encodes as its record, and its callers.
type syncJob struct {
	// gen is the committer's generation when it ran the group: a failed
	// batch poisons every group run up to then (they decided on top of it).
	gen    uint64
	p      *pendingGroup
	group  []*op
	outbox bool
}

// commitGroupWAL is commitGroup with the log: it runs the group's ops over
// bbolt's last commit and the layers above it (active, and the groups
// still being synced), collecting their writes in the group's own layer,
// and hands that layer's record to the syncer, which writes and fsyncs
// it (with whatever records queued meanwhile) and only then answers. The
// committer goes on with the next group meanwhile. bbolt takes the writes
// later, in the flusher's batches.
func (s *Store) commitGroupWAL(group []*op) {
	w := s.wal
	s.mergeDurable()
	w.mu.Lock()
	ferr := w.flushErr
	over := w.frozenBytes()+w.active.bytes >= walMaxPending
	w.mu.Unlock()
	if ferr != nil && over {
		s.failGroup(group, fmt.Errorf("bbolt cannot take the write-ahead log's writes: %w", describeWriteFailure(ferr)))
		return
	}
	for len(group) > 0 {
		layers, btx, err := w.begin(s.db, true)
		if err != nil {
			s.failGroup(group, err)
			return
		}
		g := &layer{}
		layers[0] = g
		tx := &boltTx{tx: btx, store: s, wal: true, layers: layers, top: g}
		failed := -1
		start := time.Now()
		for i, o := range group {
			before := tx.writes
			o.err = runOp(o.fn, tx)
			if o.err != nil && tx.writes != before {
				failed = i
				break
			}
		}
		_ = btx.Rollback()
		s.metrics.runNanos.Add(int64(time.Since(start)))
		if failed >= 0 {
			s.logger.Warn("bolt: op failed after writing; group re-runs without it", "ops", len(group), "err", group[failed].err)
			close(group[failed].done)
			rest := make([]*op, 0, len(group)-1)
			rest = append(rest, group[:failed]...)
			group = append(rest, group[failed+1:]...)
			s.metrics.rollbacks.Add(1)
			continue
		}
		s.metrics.groups.Add(1)
		s.metrics.ops.Add(uint64(len(group)))
		job := syncJob{group: group, outbox: tx.wakeSet}
		if g.writes == 0 {
			s.metrics.readOnly.Add(1)
		} else {
			// The syncer encodes the record: g is not written to again, and
			// the committer's serial section stays the flows alone.
			job.p = &pendingGroup{l: g}
		}
		w.mu.Lock()
		job.gen = w.gen
		if job.p != nil {
			w.pending = append(w.pending, job.p)
		}
		w.mu.Unlock()
		w.syncQ <- job
		return
	}
}

// syncLoop is the syncer goroutine: it writes the records of every group
// queued, fsyncs once, marks them durable and answers their callers. It
// exits when the committer closes syncQ.
func (s *Store) syncLoop() {
	w := s.wal
	defer close(w.syncDone)
	for job := range w.syncQ {
		jobs := []syncJob{job}
	more:
		for len(jobs) < 1024 {
			select {
			case j, ok := <-w.syncQ:
				if !ok {
					break more
				}
				jobs = append(jobs, j)
			default:
				break more
			}
		}
		// Groups run on top of a failed batch fail too, unwritten.
		w.mu.Lock()
		poisoned, pgen := w.poisoned, w.poisonGen
		w.mu.Unlock()
		var doomed []syncJob
		if poisoned {
			live := jobs[:0:0]
			for _, j := range jobs {
				if j.gen <= pgen {
					doomed = append(doomed, j)
				} else {
					live = append(live, j)
				}
			}
			jobs = live
		}
		s.failJobs(doomed, errPoisoned)
		var payloads [][]byte
		for _, j := range jobs {
			if j.p != nil {
				payloads = append(payloads, encodeLayer(nil, j.p.l))
			}
		}
		start := time.Now()
		first, err := w.log.appendAll(payloads)
		s.metrics.commitNanos.Add(int64(time.Since(start)))
		if len(payloads) > 0 {
			s.noteCommit(err) // /readyz and the 503s of a full disk (fault.go)
		}
		if err != nil {
			w.mu.Lock()
			w.poisoned, w.poisonGen = true, w.gen
			w.mu.Unlock()
			if w.log.broken != nil {
				s.logger.Error("bolt: write-ahead log write failed; writes fail until restart", "groups", len(jobs), "err", err)
				if w.logErr.Load() == nil {
					e := describeWriteFailure(err)
					w.logErr.Store(&e)
				}
			}
			s.failJobs(jobs, err)
			continue
		}
		wake := false
		w.mu.Lock()
		for _, j := range jobs {
			if j.p != nil {
				j.p.l.last, j.p.durable = first, true
				first++
			}
		}
		w.mu.Unlock()
		for _, j := range jobs {
			deliver(j.group)
			wake = wake || j.outbox
		}
		if wake {
			s.signalOutbox()
		}
		select { // the committer merges the durable groups into active
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// errPoisoned answers a group that decided on top of a group whose log
// write failed.
var errPoisoned = errors.New("an earlier write it depended on failed")

// failJobs answers jobs with err and marks their groups failed.
func (s *Store) failJobs(jobs []syncJob, err error) {
	s.wal.mu.Lock()
	for _, j := range jobs {
		if j.p != nil {
			j.p.failed = true
		}
	}
	s.wal.mu.Unlock()
	for _, j := range jobs {
		s.failGroup(j.group, err)
	}
}

// mergeDurable moves the durable groups at the head of pending into the
// active layer (the committer's: it owns active) and drops failed ones.
// After a failed batch it drops every group not durable (each decided on
// top of the failed one, and the syncer fails it) and starts a new
// generation: the next groups decide on durable state only.
func (s *Store) mergeDurable() {
	w := s.wal
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.poisoned && w.poisonGen == w.gen {
		keep := 0
		for _, p := range w.pending {
			if !p.durable {
				break
			}
			keep++
		}
		clear(w.pending[keep:])
		w.pending = w.pending[:keep]
		w.gen++
	}
	n := 0
	for _, p := range w.pending {
		if !p.durable && !p.failed {
			break
		}
		if p.durable {
			w.active.mergeFrom(p.l)
		}
		n++
	}
	if n > 0 {
		rest := copy(w.pending, w.pending[n:])
		clear(w.pending[rest:]) // the merged layers are garbage now
		w.pending = w.pending[:rest]
		w.activeVer++
	}
}

func deliver(group []*op) {
	for _, o := range group {
		close(o.done)
	}
}

// failGroup answers every op of group with ErrUnavailable.
func (s *Store) failGroup(group []*op, err error) {
	err = unavailable("commit", err)
	for _, o := range group {
		o.err = err
	}
	deliver(group)
}

// maybeFreeze hands the active layer to the flusher when it holds
// flushBytes, on a timer tick when it holds anything and no flush is under
// way, or when Flush asked. Past walMaxPending waiting it first waits for
// the flusher: memory stays bounded when bbolt falls behind the log. It
// merges what the syncer made durable first.
func (s *Store) maybeFreeze(timer bool) {
	s.mergeDurable()
	w := s.wal
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.active
	force := w.flushReq
	w.flushReq = false
	full := a.bytes >= w.flushBytes
	if a.writes == 0 || !full && !force && (!timer || len(w.frozen) > 0) {
		return // a timer tick with a flush under way: the next tick
	}
	// Each frozen layer is one bbolt transaction of at most about
	// flushBytes (bbolt holds a transaction's dirty pages in memory);
	// past walMaxPending waiting, the committer waits for the flusher.
	for w.frozenBytes()+a.bytes >= walMaxPending && len(w.frozen) > 0 && w.flushErr == nil {
		w.flushed.Wait()
	}
	w.frozen = append(w.frozen, a)
	w.active = &layer{}
	w.activeVer++
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Flush returns once bbolt holds every write acknowledged before it was
// called: with the log, it has the committer hand its writes to the
// flusher and waits for that batch commit (a backup of the bbolt file
// taken after it holds them); without the log, every acknowledged write
// is in bbolt already.
func (s *Store) Flush(ctx context.Context) error {
	if s.wal == nil {
		if s.isClosed() {
			return errClosed
		}
		return nil
	}
	// An empty op: once it is answered, every write acknowledged before
	// it is durable in the log, at or below the index the log has used.
	if err := s.write(ctx, func(*boltTx) error { return nil }); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	w := s.wal
	w.mu.Lock()
	defer w.mu.Unlock()
	target := w.log.lastIndex()
	for w.held < target {
		if w.closing {
			return fmt.Errorf("flush: %w", errClosed)
		}
		w.flushReq = true
		select {
		case s.wake <- struct{}{}:
		default:
		}
		w.flushed.Wait()
	}
	return nil
}

// flushLoop is the flusher goroutine: it commits frozen layers into bbolt
// and then drops the log segments bbolt holds.
func (s *Store) flushLoop() {
	w := s.wal
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		}
		err := s.flushFrozen()
		w.mu.Lock()
		w.flushErr = err
		w.flushed.Broadcast()
		w.mu.Unlock()
		s.noteCommit(err) // a full disk shows here first: the log's segments are preallocated
		if err != nil {
			s.logger.Error("bolt: batch commit from the write-ahead log failed; retrying", "err", err)
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// flushFrozen commits the frozen layers into bbolt, oldest first, one
// transaction each that also records the last log index it carries; each
// is dropped once committed, and the log segments bbolt then holds go.
func (s *Store) flushFrozen() error {
	for {
		w := s.wal
		w.mu.Lock()
		n := len(w.frozen)
		w.mu.Unlock()
		if n == 0 {
			return nil
		}
		if err := s.flushOldest(); err != nil {
			return err
		}
	}
}

// frozenBytes is what the frozen layers hold (w.mu held).
func (w *walState) frozenBytes() int {
	n := 0
	for _, l := range w.frozen {
		n += l.bytes
	}
	return n
}

// flushOldest commits the oldest frozen layer into bbolt.
func (s *Store) flushOldest() error {
	w := s.wal
	w.mu.Lock()
	ls := slices.Clone(w.frozen[:1])
	w.mu.Unlock()
	last := ls[len(ls)-1].last
	s.crashPoint("flush-start")
	start := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, l := range ls {
			if err := applyLayer(tx, l); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaWALIndex, binary.BigEndian.AppendUint64(nil, last))
	})
	if err != nil {
		return fmt.Errorf("commit to bbolt: %w", err)
	}
	if s.afterBoltCommit != nil {
		s.afterBoltCommit()
	}
	s.crashPoint("flush-committed")
	w.mu.Lock()
	rest := copy(w.frozen, w.frozen[len(ls):])
	clear(w.frozen[rest:]) // bbolt holds them: let them go
	w.frozen = w.frozen[:rest]
	w.held = last
	w.flushes++
	w.flushNanos += int64(time.Since(start))
	w.flushed.Broadcast()
	w.mu.Unlock()
	for _, l := range ls {
		if l.maps[bucketIndex(bucketOutbox)] != nil {
			s.signalOutbox() // a reader of bbolt alone would now see them
			break
		}
	}
	if err := w.log.removeThrough(last, func() { s.crashPoint("truncate") }); err != nil {
		return fmt.Errorf("truncate the write-ahead log: %w", err)
	}
	return nil
}

// closeWAL runs after the committer stopped: it stops the flusher, commits
// everything the log holds into bbolt and removes the log's segments. If
// bbolt cannot take them (a full disk), the log stays for the next open to
// replay, which is logged, not an error of Close: nothing is lost.
func (s *Store) closeWAL() error {
	w := s.wal
	close(w.stop)
	<-w.done
	s.mergeDurable()
	w.mu.Lock()
	w.closing = true
	w.flushed.Broadcast()
	if w.active.writes > 0 {
		w.frozen = append(w.frozen, w.active)
		w.active = &layer{}
		w.activeVer++
	}
	w.mu.Unlock()
	if err := s.flushFrozen(); err != nil {
		// Nothing is lost: the log keeps every acknowledged write, and the
		// next open replays it into bbolt (a full disk at shutdown).
		s.logger.Warn("bolt: closing: bbolt could not take the write-ahead log's writes; the log keeps them for the next open", "path", s.path, "err", err)
		return w.log.closeOnly()
	}
	return w.log.closeAndRemove()
}

// WALStats are the log's figures since Open (zero without the log).
type WALStats struct {
	// Flushes is the number of batch commits into bbolt, FlushTime their
	// total duration; Segments the log files now on disk.
	Flushes   uint64
	FlushTime time.Duration
	Segments  int
}

// WALStats returns the log's figures.
func (s *Store) WALStats() WALStats {
	if s.wal == nil {
		return WALStats{}
	}
	s.wal.mu.Lock()
	defer s.wal.mu.Unlock()
	return WALStats{Flushes: s.wal.flushes, FlushTime: time.Duration(s.wal.flushNanos), Segments: s.wal.log.segments()}
}

// crashPoint calls the crash tests' hook (nil outside them).
func (s *Store) crashPoint(name string) {
	if s.crashHook != nil {
		s.crashHook(name)
	}
}

// viewWAL is view with the log: bbolt's last commit under the layers.
func (s *Store) viewWAL(fn func(*boltTx) error) error {
	layers, btx, err := s.wal.begin(s.db, false)
	if err != nil {
		if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
			return errClosed
		}
		return unavailable("read", err)
	}
	defer func() { _ = btx.Rollback() }()
	return fn(&boltTx{tx: btx, wal: true, layers: layers})
}

// openWAL starts the log after last (every record up to it is in bbolt).
func openWAL(fs walFS, path string, last uint64, opts Options) (*walState, error) {
	if opts.WALSegmentSize <= 0 {
		opts.WALSegmentSize = DefaultWALSegmentSize
	}
	if opts.WALFlushInterval <= 0 {
		opts.WALFlushInterval = DefaultWALFlushInterval
	}
	if opts.WALFlushBytes <= 0 {
		opts.WALFlushBytes = DefaultWALFlushBytes
	}
	l, err := openLog(fs, walDir(path), last+1, opts.WALSegmentSize)
	if err != nil {
		return nil, err
	}
	l.noSync = opts.UnsafeNoSync
	w := &walState{
		log: l, flushEvery: opts.WALFlushInterval, flushBytes: opts.WALFlushBytes,
		active: &layer{}, held: last,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		syncQ: make(chan syncJob, 64), syncDone: make(chan struct{}),
	}
	w.flushed = sync.NewCond(&w.mu)
	return w, nil
}
