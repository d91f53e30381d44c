package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentledger/reconciler/internal/pollcache"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/policy"
)

// DefaultInterval is how often Run reloads the registry from the store: the
// longest a replica takes to see a change made through another.
const DefaultInterval = pollcache.DefaultInterval

// Options configure a Cache. The zero value is usable.
type Options struct {
	// Interval between reloads in Run (default DefaultInterval).
	Interval time.Duration
	// Logger receives failed reloads and reloads that changed the
	// registry (default: discard).
	Logger *slog.Logger
}

// Cache is the tool registry in memory over a ledger.Tools store. Build it
// with New, call Load before serving, and run Run for the refresh.
type Cache struct {
	store ledger.Tools
	log   *slog.Logger
	// snaps holds the snapshot and the lock that serialises loads and
	// changes (see the package doc).
	snaps *pollcache.Cache[snapshot]
}

// id names an entry in a snapshot.
type id struct{ tenant, name string }

// entry is a registered tool and its compiled policy: prog is nil when the
// tool has no policy, and err is set (prog nil) when its stored policy does
// not compile on this build.
type entry struct {
	tool ledger.Tool
	prog *policy.Program
	err  error
}

// snapshot is one immutable view of the registry: never written after it
// is published.
type snapshot struct {
	tools map[id]entry
}

// New returns a cache over store with nothing registered until the first
// Load.
func New(store ledger.Tools, o Options) *Cache {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cache{store: store, log: o.Logger, snaps: pollcache.New(&snapshot{tools: map[id]entry{}}, pollcache.Options{
		What: "tool registry", Kept: "registry", Interval: o.Interval, Logger: o.Logger,
	})}
}

// Lookup returns tenant's entry for the tool from memory.
func (c *Cache) Lookup(tenant, name string) (ledger.Tool, bool) {
	e, ok := c.snaps.Load().tools[id{tenant, name}]
	return e.tool, ok
}

// Decide is the autonomy one claim of t gets, and why it is approval:
// t's effective autonomy (ledger.Tool.EffectiveAutonomy), then, unless that
// is approval already, t's policy for this claim. A policy that is false
// sends the claim to approval with the expression as the reason; one that
// cannot be evaluated (or, stored by another build, does not compile) does
// too — it fails closed. The program compiled for t's version is reused;
// an entry this cache has not loaded is compiled on the spot.
func (c *Cache) Decide(ctx context.Context, t ledger.Tool, runID string, intent json.RawMessage) (ledger.Autonomy, string) {
	eff, reason := t.EffectiveAutonomy()
	if eff == ledger.AutonomyApproval || strings.TrimSpace(t.Policy) == "" {
		return eff, reason
	}
	e, ok := c.snaps.Load().tools[id{t.Tenant, t.Name}]
	if !ok || e.tool.Version != t.Version || e.tool.Policy != t.Policy {
		e = compiled(t, nil)
	}
	if e.err != nil {
		return ledger.AutonomyApproval, clip("policy does not compile (fail closed): " + e.err.Error())
	}
	pass, err := e.prog.Eval(ctx, policy.Input{Tenant: t.Tenant, RunID: runID, Tool: t.Name, Intent: intent})
	switch {
	case err != nil:
		return ledger.AutonomyApproval, clip("policy could not be evaluated (fail closed): " + err.Error())
	case !pass:
		return ledger.AutonomyApproval, clip("policy: " + t.Policy)
	}
	return eff, ""
}

// compiled returns t's entry with its policy compiled, reusing prev's
// program when prev holds the same version of the same policy.
func compiled(t ledger.Tool, prev *entry) entry {
	if strings.TrimSpace(t.Policy) == "" {
		return entry{tool: t}
	}
	if prev != nil && prev.tool.Version == t.Version && prev.tool.Policy == t.Policy {
		return entry{tool: t, prog: prev.prog, err: prev.err}
	}
	p, err := policy.Compile(t.Policy)
	return entry{tool: t, prog: p, err: err}
}

// clip bounds a reason to what an approval record keeps.
func clip(s string) string {
	if len(s) <= ledger.MaxNoteLen {
		return s
	}
	cut := ledger.MaxNoteLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Load reads every entry from the store and makes it the registry Lookup
// answers from. The registry in memory is left alone when the store fails.
func (c *Cache) Load(ctx context.Context) error {
	unlock, err := c.snaps.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("load tools: %w", err)
	}
	defer unlock()
	list, err := c.store.ListTools(ctx, "")
	if err != nil {
		return fmt.Errorf("load tools: %w", err)
	}
	old := c.snaps.Load()
	next := &snapshot{tools: make(map[id]entry, len(list))}
	changed := len(list) != len(old.tools)
	for _, t := range list {
		k := id{t.Tenant, t.Name}
		var e entry
		if prev, ok := old.tools[k]; ok {
			e = compiled(t, &prev)
			changed = changed || prev.tool.Version != t.Version || !prev.tool.UpdatedAt.Equal(t.UpdatedAt)
		} else {
			e, changed = compiled(t, nil), true
		}
		if e.err != nil && (old.tools[k].tool.Version != t.Version || old.tools[k].err == nil) {
			c.log.WarnContext(ctx, "tool registry: a stored policy does not compile; its claims go to approval",
				"tenant", t.Tenant, "tool", t.Name, "version", t.Version, "err", e.err)
		}
		next.tools[k] = e
	}
	c.snaps.Store(next)
	if changed {
		c.log.InfoContext(ctx, "tool registry loaded", "tools", len(list))
	}
	return nil
}

// Put registers t (ledger.Tools.PutTool): durably in the store, then in
// memory, before it returns the stored entry and whether it changed. A
// policy that does not compile is refused before the store is asked
// (ledger.ErrInvalidPolicy, naming line and column).
func (c *Cache) Put(ctx context.Context, t ledger.Tool) (ledger.Tool, bool, error) {
	e := compiled(t, nil)
	if e.err != nil {
		return ledger.Tool{}, false, e.err
	}
	unlock, err := c.snaps.Acquire(ctx)
	if err != nil {
		return ledger.Tool{}, false, fmt.Errorf("register %s/%s: %w", t.Tenant, t.Name, err)
	}
	defer unlock()
	stored, changed, err := c.store.PutTool(ctx, t)
	if err != nil {
		return ledger.Tool{}, false, fmt.Errorf("register %s/%s: %w", t.Tenant, t.Name, err)
	}
	e.tool = stored
	c.swap(func(m map[id]entry) { m[id{stored.Tenant, stored.Name}] = e })
	return stored, changed, nil
}

// Delete removes tenant's entry: in the store, then in memory. Errors:
// ledger.ErrToolNotFound, ledger.ErrInvalid, ledger.ErrUnavailable.
func (c *Cache) Delete(ctx context.Context, tenant, name string) error {
	unlock, err := c.snaps.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("unregister %s/%s: %w", tenant, name, err)
	}
	defer unlock()
	err = c.store.DeleteTool(ctx, tenant, name)
	if err == nil || isNotFound(err) {
		// Not found in the store: another replica deleted it; forget it here too.
		c.swap(func(m map[id]entry) { delete(m, id{tenant, name}) })
	}
	if err != nil {
		return fmt.Errorf("unregister %s/%s: %w", tenant, name, err)
	}
	return nil
}

// Get reads tenant's entry from the store.
func (c *Cache) Get(ctx context.Context, tenant, name string) (ledger.Tool, error) {
	return c.store.GetTool(ctx, tenant, name)
}

// List reads tenant's entries from the store, by name.
func (c *Cache) List(ctx context.Context, tenant string) ([]ledger.Tool, error) {
	return c.store.ListTools(ctx, tenant)
}

// Run reloads the registry every interval until ctx ends, and then returns
// nil. A failed reload is logged and keeps the last registry.
func (c *Cache) Run(ctx context.Context) error { return c.snaps.Run(ctx, c.Load) }

// swap publishes a copy of the snapshot changed by fn; callers hold the lock.
func (c *Cache) swap(fn func(map[id]entry)) {
	old := c.snaps.Load()
	m := maps.Clone(old.tools)
	fn(m)
	c.snaps.Store(&snapshot{tools: m})
}

func isNotFound(err error) bool { return errors.Is(err, ledger.ErrToolNotFound) }
