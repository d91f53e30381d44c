package bolt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A commit that fails (ENOSPC, EIO: bbolt could not write its pages or
// fsync them) is rolled back by bbolt — the file's meta page still names
// the last good commit — and every op of the group gets ErrUnavailable,
// which the API and the webhooks answer with 503 and Retry-After. The
// committer goes on: the next group tries again, and the first commit that
// succeeds ends the episode. writeHealth is what the store knows of it, so
// that /readyz can say so and the log says it once, not once per request.
//
// Hook point for a write path that replaces the committer: call
// noteCommit after every commit attempt that wrote (nil on success).

// probeEvery bounds how often Writable tries a write while commits fail;
// probeSize is how much that write needs: a run of fresh pages, as a group
// of claims needs, not the odd free page inside the file, which lets a
// tiny write through a full disk. quiet is how long commits must have
// succeeded without a failure for an episode to end: at the edge of full,
// small commits pass between failing ones.
const (
	probeEvery = time.Second
	probeSize  = 256 << 10
	quiet      = 2 * time.Second
)

var metaWriteProbe = []byte("write_probe")

type writeHealth struct {
	mu        sync.Mutex
	err       error     // the first failure of the episode; nil while commits succeed
	since     time.Time // when the episode began
	lastFail  time.Time
	failures  int
	lastProbe time.Time
	// logged is when an episode's failure was last logged, and
	// loggedThis whether this episode's was: a disk at the edge of full
	// lets small commits through between failing ones, and one line a
	// minute says so, not one per flap.
	logged     time.Time
	loggedThis bool
}

// logEvery bounds how often a failing episode is logged.
const logEvery = time.Minute

// ErrDiskFull is in the chain of the error a commit fails with when the
// file system has no space left (ENOSPC, EDQUOT).
var ErrDiskFull = errors.New("disk full")

// describeWriteFailure says what a failed commit means for an operator.
func describeWriteFailure(err error) error {
	// bbolt words some failures with %s (growing the file), which drops
	// the errno: its text is all that is left.
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), syscall.ENOSPC.Error()) || strings.Contains(err.Error(), syscall.EDQUOT.Error()) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// noteCommit records the outcome of a commit that wrote. The first
// failure of an episode and the first success after it are logged, once
// each.
func (s *Store) noteCommit(err error) {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	switch {
	case err == nil && h.err != nil:
		if now.Sub(h.lastFail) < quiet {
			return // the edge of full: wait for commits to pass for a while
		}
		if h.loggedThis {
			s.logger.Info("bolt: writes succeed again; claims and webhooks are served",
				"path", s.path, "failed_for", now.Sub(h.since).Round(time.Millisecond).String(), "failed_commits", h.failures)
		}
		h.err, h.failures, h.loggedThis = nil, 0, false
	case err != nil && h.err == nil:
		h.err, h.since, h.lastFail, h.failures = describeWriteFailure(err), now, now, 1
		if !h.logged.IsZero() && now.Sub(h.logged) < logEvery {
			return
		}
		h.logged, h.loggedThis = now, true
		what := "writes fail"
		if errors.Is(h.err, ErrDiskFull) {
			what = "disk full"
		}
		s.logger.Error("bolt: "+what+": commits are rolled back and claims and webhooks answer 503 until a write succeeds",
			"path", s.path, "err", err)
	case err != nil:
		h.failures++
		h.lastFail = now
	}
}

// WriteErr returns nil while commits succeed, else what the current
// episode of failing commits is (ErrDiskFull in its chain for a full
// disk), and since when.
func (s *Store) WriteErr() error {
	if s.wal != nil {
		if e := s.wal.logErr.Load(); e != nil {
			return fmt.Errorf("bolt: %s: the write-ahead log failed; writes fail until restart: %w", s.path, *e)
		}
	}
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return fmt.Errorf("bolt: %s: writes failing since %s (%d commits): %w", s.path,
		h.since.UTC().Format(time.RFC3339), h.failures, h.err)
}

// Writable is the readiness of the store's writes: nil while commits
// succeed. While they fail it tries one small write (at most every
// probeEvery), so a node nobody sends claims to — /readyz took it out of
// a load balancer — notices that the disk has room again.
func (s *Store) Writable(ctx context.Context) error {
	h := &s.health
	h.mu.Lock()
	failing, probe := h.err != nil, time.Since(h.lastProbe) >= probeEvery
	if failing && probe {
		h.lastProbe = time.Now()
	}
	h.mu.Unlock()
	if s.wal != nil && s.wal.logErr.Load() != nil {
		return s.WriteErr() // the log failed: no probe can bring it back
	}
	if !failing {
		return nil
	}
	if probe {
		// A run of fresh pages, then its removal: the second commit gives
		// them back to the free list.
		v := make([]byte, probeSize)
		if s.write(ctx, func(tx *boltTx) error {
			tx.writes++
			return tx.bucket(bucketMeta).Put(metaWriteProbe, v)
		}) == nil {
			_ = s.write(ctx, func(tx *boltTx) error {
				tx.writes++
				return tx.bucket(bucketMeta).Delete(metaWriteProbe)
			})
		}
	}
	return s.WriteErr()
}
