package pollcache

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/agentledger/reconciler/ledger"
)

// DefaultInterval is how often Run reloads when Options leave it unset:
// the longest a replica takes to see a change made through another.
const DefaultInterval = 2 * time.Second

// ReloadTimeout bounds one of Run's reloads: a store read that hangs (a
// half-open pooled connection) must not hold the lock that changes wait
// for.
const ReloadTimeout = 5 * time.Second

// Options configure a Cache.
type Options struct {
	// What names the cache in errors and logs ("kill switch").
	What string
	// Kept names what a failed reload keeps, in its log line ("freezes").
	Kept string
	// Interval between reloads in Run (default DefaultInterval).
	Interval time.Duration
	// Logger receives failed reloads (default: discard).
	Logger *slog.Logger
}

// Cache holds the current snapshot *S.
type Cache[S any] struct {
	what, kept string
	interval   time.Duration
	log        *slog.Logger
	lock       *semaphore.Weighted
	snap       atomic.Pointer[S]
}

// New returns a cache whose snapshot is initial until the first Store.
func New[S any](initial *S, o Options) *Cache[S] {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache[S]{what: o.What, kept: o.Kept, interval: o.Interval, log: o.Logger, lock: semaphore.NewWeighted(1)}
	c.snap.Store(initial)
	return c
}

// Load returns the current snapshot; callers must not modify it.
func (c *Cache[S]) Load() *S { return c.snap.Load() }

// Store publishes s, which must not be modified afterwards. Callers hold
// the lock (Acquire).
func (c *Cache[S]) Store(s *S) { c.snap.Store(s) }

// Acquire takes the writers' lock, or gives up with ctx's error (as
// ledger.ErrUnavailable, which the API answers 503).
func (c *Cache[S]) Acquire(ctx context.Context) (unlock func(), err error) {
	if err := c.lock.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("%w: %s busy: %w", ledger.ErrUnavailable, c.what, err)
	}
	return func() { c.lock.Release(1) }, nil
}

// Run calls reload every interval, each call bounded by ReloadTimeout,
// until ctx ends, and then returns nil. A failed reload is logged; reload
// itself must leave the snapshot alone when it fails.
func (c *Cache[S]) Run(ctx context.Context, reload func(context.Context) error) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, ReloadTimeout)
		err := reload(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, c.what+": reload failed; keeping the last loaded "+c.kept, "err", err)
		}
	}
}
