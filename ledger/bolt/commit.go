package bolt

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// op is one write waiting for the committer: a closure over the shared
// transaction that is deterministic and safe to run again (a group that
// rolls back re-runs its survivors), and the slot its answer is delivered in.
type op struct {
	fn    func(*boltTx) error
	err   error
	done  chan struct{}
	state atomic.Int32
}

// States of an op. The caller and the committer race to move an op out of
// opQueued: a caller whose ctx ends first withdraws it (and gets ctx.Err()),
// otherwise the committer owns it and the caller waits for the durable
// answer — a write that may already be in a group is never reported as
// abandoned, because it might commit.
const (
	opQueued int32 = iota
	opTaken
	opWithdrawn
)

// errReadOnly ends a group none of whose ops wrote anything (replays,
// waits, not-found answers): rolling back instead of committing skips two
// fdatasyncs, and every answer read only state that was already durable.
var errReadOnly = errors.New("group wrote nothing")

// errRollback aborts a group's bbolt transaction after one of its ops failed
// half-way; the group then runs again without that op.
var errRollback = errors.New("group rolled back")

// write enqueues fn for the committer and waits for its durable answer.
func (s *Store) write(ctx context.Context, fn func(*boltTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{fn: fn, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.queue = append(s.queue, o)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // the committer is already awake and will see the queue
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opWithdrawn) {
			return ctx.Err()
		}
		<-o.done // taken: the commit is bounded by one fsync, wait for it
		return o.err
	}
}

// commitLoop is the committer goroutine: the only writer of the file. It
// exits after Close once the queue is empty.
func (s *Store) commitLoop() {
	defer close(s.loopDone)
	var tick <-chan time.Time
	if s.wal != nil {
		go s.syncLoop()
		defer func() { // the syncer answers every group handed to it first
			close(s.wal.syncQ)
			<-s.wal.syncDone
		}()
		// The timer hands the log's writes to the flusher when the load
		// is too light to fill a batch.
		t := time.NewTicker(s.wal.flushEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.wake:
			if s.wal != nil {
				s.maybeFreeze(false) // merges what the syncer made durable
			}
		case <-tick:
			s.maybeFreeze(true)
			continue
		}
		for {
			group, closed := s.take()
			if len(group) == 0 {
				if closed {
					return
				}
				break
			}
			if s.wal != nil {
				s.commitGroupWAL(group)
			} else {
				s.commitGroup(group)
			}
		}
	}
}

// take removes up to MaxGroup ops from the head of the queue and claims
// them; ops withdrawn by their callers are dropped. Before taking, it yields
// the processor while the queue is still growing: the callers released by
// the previous commit are runnable but may not have enqueued their next
// write yet, and letting them run first makes the next group larger instead
// of splitting the load into two commits. It never waits on a timer: with
// nothing runnable the queue stops growing at once. (Yielding until every
// released caller is back measured five times slower: a caller that does
// not come back soon costs every yield, and the spinning committer starves
// the callers it waits for.)
func (s *Store) take() ([]*op, bool) {
	prev := -1
	for i := 0; i < s.maxYields; i++ {
		n := s.queued()
		if n <= prev || n >= s.maxGroup {
			break
		}
		prev = n
		runtime.Gosched()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var group []*op
	for len(group) == 0 && len(s.queue) > 0 {
		n := min(len(s.queue), s.maxGroup)
		group = make([]*op, 0, n)
		for _, o := range s.queue[:n] {
			if o.state.CompareAndSwap(opQueued, opTaken) {
				group = append(group, o)
			}
		}
		rest := copy(s.queue, s.queue[n:])
		clear(s.queue[rest:])
		s.queue = s.queue[:rest]
	}
	return group, s.closed
}

// commitGroup runs every op of group in one bbolt read-write transaction,
// commits it (two fdatasyncs: pages, then the meta page) and only then
// delivers the answers. A group that wrote nothing is rolled back instead. An op that fails after writing rolls the whole
// transaction back; it alone gets its error and the group runs again
// without it, as bbolt's own Batch does. An op that fails before writing
// leaves the transaction as it found it, so its error is kept and the
// group goes on; it is delivered after the commit like every other answer.
func (s *Store) commitGroup(group []*op) {
	for len(group) > 0 {
		failed := -1
		start := time.Now()
		var ran time.Time
		err := s.db.Update(func(btx *bolt.Tx) error {
			tx := newTx(s, btx)
			for i, o := range group {
				before := tx.writes
				o.err = runOp(o.fn, tx)
				if o.err != nil && tx.writes != before {
					failed = i
					return errRollback
				}
			}
			ran = time.Now()
			if tx.writes == 0 {
				return errReadOnly
			}
			return nil
		})
		wrote := !errors.Is(err, errReadOnly)
		if !wrote {
			err = nil
			s.metrics.readOnly.Add(1)
		}
		if !ran.IsZero() {
			s.metrics.runNanos.Add(int64(ran.Sub(start)))
			s.metrics.commitNanos.Add(int64(time.Since(ran)))
		}
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
		if wrote {
			s.noteCommit(err) // logs the first failure and the recovery (fault.go)
		}
		if err != nil {
			err = unavailable("commit", describeWriteFailure(err))
			for _, o := range group {
				o.err = err
			}
		}
		for _, o := range group {
			close(o.done)
		}
		return
	}
}

// runOp runs one op; a panic becomes that op's error and counts as a write,
// so the group rolls back rather than commit whatever the op half did, and
// the committer goroutine survives to serve the other callers.
func runOp(fn func(*boltTx) error, tx *boltTx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			tx.writes++
			err = fmt.Errorf("bolt: op panicked: %v", r)
		}
	}()
	return fn(tx)
}

// queued returns how many ops wait for the committer (tests and stats).
func (s *Store) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}
