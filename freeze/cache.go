package freeze

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/agentledger/reconciler/ledger"
)

// DefaultInterval is how often Run reloads the freezes from the store: the
// longest a replica takes to see a change made through another.
const DefaultInterval = 2 * time.Second

// reloadTimeout bounds one of Run's reloads: a store read that hangs (a
// half-open pooled connection) must not hold the lock that freezes and
// unfreezes wait for.
const reloadTimeout = 5 * time.Second

// Options configure a Cache. The zero value is usable.
type Options struct {
	// Interval between reloads in Run (default DefaultInterval).
	Interval time.Duration
	// Logger receives failed reloads and reloads that changed the set
	// (default: discard). Changes made through Put and Delete are logged by
	// their caller (the API), which knows who asked.
	Logger *slog.Logger
}

// Cache is the kill switch in memory over a ledger.Freezes store. Build it
// with New, call Load before serving, and run Run for the refresh.
type Cache struct {
	store    ledger.Freezes
	interval time.Duration
	log      *slog.Logger

	// lock serialises loads and changes (see the package doc): a semaphore
	// rather than a mutex, so a request waiting for it gives up when its
	// context ends.
	lock *semaphore.Weighted
	snap atomic.Pointer[snapshot]
}

// snapshot is one immutable view of the freezes: never written after it is
// published.
type snapshot struct {
	list []ledger.Freeze // CompareFreezes order
}

func newSnapshot(list []ledger.Freeze) *snapshot { return &snapshot{list: list} }

// New returns a cache over store with nothing frozen until the first Load.
func New(store ledger.Freezes, o Options) *Cache {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{store: store, interval: o.Interval, log: o.Logger, lock: semaphore.NewWeighted(1)}
	c.snap.Store(newSnapshot(nil))
	return c
}

// Frozen reports whether tool, or its class, is frozen for tenant. It is
// the api.Options.Frozen func: it reads memory only. The rule is
// ledger.Freeze.Covers; a kill switch holds a handful of entries, so a scan
// costs less than keeping an index of them in step.
func (c *Cache) Frozen(tenant, tool string, class ledger.ToolClass) bool {
	return slices.ContainsFunc(c.snap.Load().list, func(f ledger.Freeze) bool { return f.Covers(tenant, tool, class) })
}

// Snapshot returns the freezes in memory, ordered by tenant and target.
func (c *Cache) Snapshot() []ledger.Freeze {
	return slices.Clone(c.snap.Load().list)
}

// Load reads every freeze from the store, makes it the set Frozen answers
// from, and returns it. The set in memory is left alone when the store
// fails.
func (c *Cache) Load(ctx context.Context) ([]ledger.Freeze, error) {
	unlock, err := c.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("load freezes: %w", err)
	}
	defer unlock()
	list, err := c.store.ListFreezes(ctx)
	if err != nil {
		return nil, fmt.Errorf("load freezes: %w", err)
	}
	slices.SortFunc(list, ledger.CompareFreezes) // the store's order already; cheap insurance
	old := c.snap.Load()
	c.snap.Store(newSnapshot(list))
	if !sameSet(old.list, list) {
		c.log.InfoContext(ctx, "kill switch: freezes loaded", "count", len(list))
	}
	return slices.Clone(list), nil
}

// Put freezes f.Target for f.Tenant: durably in the store, then in memory,
// before it returns. Errors: ledger.ErrInvalidFreeze, ledger.ErrUnavailable.
func (c *Cache) Put(ctx context.Context, f ledger.Freeze) error {
	unlock, err := c.acquire(ctx)
	if err != nil {
		return fmt.Errorf("freeze %s/%s: %w", f.Tenant, f.Target, err)
	}
	defer unlock()
	if err := c.store.PutFreeze(ctx, f); err != nil {
		return fmt.Errorf("freeze %s/%s: %w", f.Tenant, f.Target, err)
	}
	f.At = f.At.UTC()
	list := slices.DeleteFunc(c.Snapshot(), func(g ledger.Freeze) bool { return g.Tenant == f.Tenant && g.Target == f.Target })
	list = append(list, f)
	slices.SortFunc(list, ledger.CompareFreezes)
	c.snap.Store(newSnapshot(list))
	return nil
}

// Delete unfreezes tenant's target: in the store, then in memory. Deleting
// a target that is not frozen is not an error.
func (c *Cache) Delete(ctx context.Context, tenant, target string) error {
	unlock, err := c.acquire(ctx)
	if err != nil {
		return fmt.Errorf("unfreeze %s/%s: %w", tenant, target, err)
	}
	defer unlock()
	if err := c.store.DeleteFreeze(ctx, tenant, target); err != nil {
		return fmt.Errorf("unfreeze %s/%s: %w", tenant, target, err)
	}
	list := slices.DeleteFunc(c.Snapshot(), func(g ledger.Freeze) bool { return g.Tenant == tenant && g.Target == target })
	c.snap.Store(newSnapshot(list))
	return nil
}

// Run reloads the freezes every interval until ctx ends, and then returns
// nil. A failed reload is logged and keeps the last set.
func (c *Cache) Run(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		_, err := c.Load(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "kill switch: reload failed; keeping the last loaded freezes", "err", err)
		}
	}
}

// acquire takes the lock, or gives up with ctx's error (as
// ledger.ErrUnavailable, which the API answers 503).
func (c *Cache) acquire(ctx context.Context) (unlock func(), err error) {
	if err := c.lock.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("%w: kill switch busy: %w", ledger.ErrUnavailable, err)
	}
	return func() { c.lock.Release(1) }, nil
}

// sameSet reports whether two ordered lists name the same tenant/targets.
func sameSet(a, b []ledger.Freeze) bool {
	return slices.EqualFunc(a, b, func(x, y ledger.Freeze) bool { return x.Tenant == y.Tenant && x.Target == y.Target })
}
