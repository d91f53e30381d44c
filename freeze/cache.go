package freeze

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/agentledger/reconciler/internal/pollcache"
	"github.com/agentledger/reconciler/ledger"
)

// DefaultInterval is how often Run reloads the freezes from the store: the
// longest a replica takes to see a change made through another.
const DefaultInterval = pollcache.DefaultInterval

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
	store ledger.Freezes
	log   *slog.Logger
	// snaps holds the snapshot and the lock that serialises loads and
	// changes (see the package doc).
	snaps *pollcache.Cache[snapshot]
}

// snapshot is one immutable view of the freezes: never written after it is
// published.
type snapshot struct {
	list []ledger.Freeze // CompareFreezes order
}

func newSnapshot(list []ledger.Freeze) *snapshot { return &snapshot{list: list} }

// New returns a cache over store with nothing frozen until the first Load.
func New(store ledger.Freezes, o Options) *Cache {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cache{store: store, log: o.Logger, snaps: pollcache.New(newSnapshot(nil), pollcache.Options{
		What: "kill switch", Kept: "freezes", Interval: o.Interval, Logger: o.Logger,
	})}
}

// Frozen reports whether tool, or its class, is frozen for tenant. It is
// the api.Options.Frozen func: it reads memory only. The rule is
// ledger.Freeze.Covers; a kill switch holds a handful of entries, so a scan
// costs less than keeping an index of them in step.
func (c *Cache) Frozen(tenant, tool string, class ledger.ToolClass) bool {
	return slices.ContainsFunc(c.snaps.Load().list, func(f ledger.Freeze) bool { return f.Covers(tenant, tool, class) })
}

// Snapshot returns the freezes in memory, ordered by tenant and target.
func (c *Cache) Snapshot() []ledger.Freeze {
	return slices.Clone(c.snaps.Load().list)
}

// Load reads every freeze from the store, makes it the set Frozen answers
// from, and returns it. The set in memory is left alone when the store
// fails.
func (c *Cache) Load(ctx context.Context) ([]ledger.Freeze, error) {
	unlock, err := c.snaps.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("load freezes: %w", err)
	}
	defer unlock()
	list, err := c.store.ListFreezes(ctx)
	if err != nil {
		return nil, fmt.Errorf("load freezes: %w", err)
	}
	slices.SortFunc(list, ledger.CompareFreezes) // the store's order already; cheap insurance
	old := c.snaps.Load()
	c.snaps.Store(newSnapshot(list))
	if !sameSet(old.list, list) {
		c.log.InfoContext(ctx, "kill switch: freezes loaded", "count", len(list))
	}
	return slices.Clone(list), nil
}

// Put freezes f.Target for f.Tenant: durably in the store, then in memory,
// before it returns. Errors: ledger.ErrInvalidFreeze, ledger.ErrUnavailable.
func (c *Cache) Put(ctx context.Context, f ledger.Freeze) error {
	unlock, err := c.snaps.Acquire(ctx)
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
	c.snaps.Store(newSnapshot(list))
	return nil
}

// Delete unfreezes tenant's target: in the store, then in memory. Deleting
// a target that is not frozen is not an error.
func (c *Cache) Delete(ctx context.Context, tenant, target string) error {
	unlock, err := c.snaps.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("unfreeze %s/%s: %w", tenant, target, err)
	}
	defer unlock()
	if err := c.store.DeleteFreeze(ctx, tenant, target); err != nil {
		return fmt.Errorf("unfreeze %s/%s: %w", tenant, target, err)
	}
	list := slices.DeleteFunc(c.Snapshot(), func(g ledger.Freeze) bool { return g.Tenant == tenant && g.Target == target })
	c.snaps.Store(newSnapshot(list))
	return nil
}

// Run reloads the freezes every interval until ctx ends, and then returns
// nil. A failed reload is logged and keeps the last set.
func (c *Cache) Run(ctx context.Context) error {
	return c.snaps.Run(ctx, func(ctx context.Context) error {
		_, err := c.Load(ctx)
		return err
	})
}

// sameSet reports whether two ordered lists name the same tenant/targets.
func sameSet(a, b []ledger.Freeze) bool {
	return slices.EqualFunc(a, b, func(x, y ledger.Freeze) bool { return x.Tenant == y.Tenant && x.Target == y.Target })
}
