package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/paging"
)

// Store is what the resolver needs of the ledger: the due index and the
// three writes that close, page or postpone a row (ledger.Store has them).
type Store interface {
	Due(ctx context.Context, now time.Time, limit int) ([]ledger.Row, error)
	Apply(ctx context.Context, tenant, key string, ev ledger.Evidence) (ledger.Row, ledger.Change, error)
	Escalate(ctx context.Context, tenant, key string, at time.Time) (ledger.Row, bool, error)
	Reschedule(ctx context.Context, tenant, key string, next time.Time) error
}

// DueClaimer is a Store that lets several resolvers share the due rows
// (ledger/postgres.Store implements it). ClaimDue takes up to limit rows due
// at or before now and moves their next check to now+lease in the same
// transaction, so no other caller gets them until the lease ends. When the
// Store given to New implements it, Pass uses it instead of Due.
type DueClaimer interface {
	ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]ledger.Row, error)
}

// Pager pages a human and resolves the page; paging.PagerDuty,
// paging.Webhook and paging.Log implement it.
type Pager interface {
	Trigger(ctx context.Context, p paging.Page) error
	Resolve(ctx context.Context, dedupKey string) error
}

// Options configure New. Zero fields take the defaults below.
type Options struct {
	// Lookups maps a row's vendor ("stripe", "paypal") to its lookup. A
	// vendor without one is paged once its window has closed.
	Lookups map[string]Lookup
	// Pager receives pages (default: paging.Log on Logger).
	Pager Pager
	// Frozen is the kill switch: true when the tool or its class is frozen
	// for the tenant (nil: never). A frozen row is not replayed — a replay
	// is a write — but still looked up, and paged once its window closes.
	Frozen func(tenant, tool string, class ledger.ToolClass) bool
	// Interval between passes of Run (default 30 s).
	Interval time.Duration
	// Limit is how many due rows one pass takes (default 1000).
	Limit int
	// Workers is how many rows of one vendor are worked on at once (default 8).
	Workers int
	// VendorTimeout bounds one vendor's share of a pass (default Interval);
	// rows it did not reach are rescheduled for the next pass.
	VendorTimeout time.Duration
	// SearchLag: a lookup miss counts as absence only this long after the
	// row's last attempt could have reached the vendor (default 5 min).
	SearchLag time.Duration
	// MinBackoff and MaxBackoff bound how far a row is pushed back when it
	// is not decided (defaults Interval and 1 h).
	MinBackoff, MaxBackoff time.Duration
	// Lease is how long rows taken through a DueClaimer stay this
	// resolver's (default VendorTimeout plus twice the store timeout, so a
	// pass's last writes land inside it). Unused with a plain Store.
	Lease time.Duration
	// PageTimeout bounds one page (the pager retries inside it; default
	// 30 s). A page not delivered in time is tried again next pass.
	PageTimeout time.Duration
	// Source is the page's source field (default "reconciler").
	Source string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default: discard).
	Logger *slog.Logger
	// Registerer receives the resolver's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// TracerProvider receives the resolve and page spans (tracing.go);
	// nil: none.
	TracerProvider trace.TracerProvider
}

// Defaults of Options.
const (
	DefaultInterval    = 30 * time.Second
	DefaultLimit       = 1000
	DefaultWorkers     = 8
	DefaultSearchLag   = 5 * time.Minute
	DefaultMaxBackoff  = time.Hour
	DefaultPageTimeout = 30 * time.Second
	// storeTimeout bounds a store write made after a vendor's time is up.
	storeTimeout = 10 * time.Second
)

// The actions of reconciler_resolver_actions_total.
const (
	ActionFound    = "found"
	ActionReplayed = "replayed"
	ActionAbsent   = "absent"
	ActionPaged    = "paged"
	ActionError    = "error"
)

// Resolver is the periodic resolve job. Run owns its loop; Pass is one pass.
// A Resolver is safe for concurrent use, though Run never overlaps passes.
type Resolver struct {
	store   Store
	claimer DueClaimer // store, when it leases due rows; nil otherwise
	opts    Options
	logger  *slog.Logger
	metrics *metrics
	tracer  trace.Tracer
	// wake holds one request for an early pass (Wake).
	wake chan struct{}

	mu sync.Mutex
	// pausedUntil is the per-vendor circuit: after a 429/5xx/timeout the
	// vendor is left alone until then, and fails counts the failures in a row.
	pausedUntil map[string]time.Time
	fails       map[string]int
}

// New returns a resolver over store. It does not start anything; call Run.
func New(store Store, opts Options) *Resolver {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Limit <= 0 {
		opts.Limit = DefaultLimit
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.VendorTimeout <= 0 {
		opts.VendorTimeout = opts.Interval
	}
	if opts.Lease <= 0 {
		opts.Lease = opts.VendorTimeout + 2*storeTimeout
	}
	if opts.SearchLag <= 0 {
		opts.SearchLag = DefaultSearchLag
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = opts.Interval
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.PageTimeout <= 0 {
		opts.PageTimeout = DefaultPageTimeout
	}
	if opts.Source == "" {
		opts.Source = paging.DefaultSource
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Pager == nil {
		opts.Pager = paging.NewLog(opts.Logger)
	}
	claimer, _ := store.(DueClaimer)
	return &Resolver{
		store: store, claimer: claimer, opts: opts, logger: opts.Logger, metrics: newMetrics(opts.Registerer, opts.Logger),
		tracer: tracerOf(opts.TracerProvider), pausedUntil: map[string]time.Time{}, fails: map[string]int{},
		wake: make(chan struct{}, 1),
	}
}

// Run passes every Interval until ctx ends, then returns nil. A failed pass
// is logged and the loop goes on: the store or a vendor may be back by the
// next one.
func (r *Resolver) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("resolver: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.wake:
		}
	}
}

// Wake asks Run for a pass now rather than at the next tick (a webhook
// hint made a row due: the vendor is asked within a pass, not an
// Interval). Requests made during a pass fold into one more pass. It
// never blocks.
func (r *Resolver) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Pass takes up to Limit due rows from the due index (never a full scan)
// and works them, each vendor in its own goroutine with its own deadline,
// so one vendor's outage costs the others nothing. It returns when every
// vendor's share is done or timed out; the error is the store's Due error.
// With a DueClaimer the rows are leased for Lease, so resolvers of other
// replicas skip them: every row is worked by one resolver per lease.
func (r *Resolver) Pass(ctx context.Context) error {
	start := time.Now()
	defer func() { r.metrics.cycle.Observe(time.Since(start).Seconds()) }()
	now := r.opts.Now().UTC()
	var rows []ledger.Row
	var err error
	if r.claimer != nil {
		rows, err = r.claimer.ClaimDue(ctx, now, r.opts.Limit, r.opts.Lease)
	} else {
		rows, err = r.store.Due(ctx, now, r.opts.Limit)
	}
	if err != nil {
		return fmt.Errorf("resolver: due rows: %w", err)
	}
	byVendor := map[string][]ledger.Row{}
	var order []string
	for _, row := range rows {
		if _, ok := byVendor[row.Vendor]; !ok {
			order = append(order, row.Vendor)
		}
		byVendor[row.Vendor] = append(byVendor[row.Vendor], row)
	}
	var wg sync.WaitGroup
	for _, vendor := range order {
		wg.Go(func() { r.vendorPass(ctx, vendor, byVendor[vendor], now) })
	}
	wg.Wait()
	return nil
}

// vendorPass works one vendor's due rows with Workers goroutines until the
// rows run out or VendorTimeout passes; rows left over are rescheduled so
// they do not clog the head of the due index.
func (r *Resolver) vendorPass(ctx context.Context, vendor string, rows []ledger.Row, now time.Time) {
	vctx, cancel := context.WithTimeout(ctx, r.opts.VendorTimeout)
	defer cancel()
	lk := r.opts.Lookups[vendor]
	next := make(chan ledger.Row)
	var wg sync.WaitGroup
	for range min(r.opts.Workers, len(rows)) {
		wg.Go(func() {
			for row := range next {
				r.work(vctx, lk, row, now)
			}
		})
	}
	i := 0
feed:
	for ; i < len(rows); i++ {
		select {
		case next <- rows[i]:
		case <-vctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	// Out of time, not shutting down: push the rest back so they do not
	// clog the head of the due index. On shutdown they simply stay due.
	if i < len(rows) && ctx.Err() == nil {
		r.logger.Warn("resolver: vendor out of time this pass", "vendor", vendor, "left", len(rows)-i)
		for _, row := range rows[i:] {
			r.reschedule(ctx, row, now.Add(jitter(r.opts.MinBackoff)))
		}
	}
}

// work resolves one row and counts what it did. Every row that stays open
// is rescheduled, whatever happened.
func (r *Resolver) work(ctx context.Context, lk Lookup, row ledger.Row, now time.Time) {
	log := r.logger.With("tenant", row.Tenant, "key", row.Key, "vendor", row.Vendor)
	ctx, span := r.startResolve(ctx, row)
	if until, paused := r.paused(row.Vendor, now); paused {
		span.SetAttributes(keyPaused.Bool(true))
		next := until.Add(jitter(r.opts.MinBackoff / 4))
		r.reschedule(ctx, row, next)
		endResolve(span, outcome{next: next})
		return
	}
	out := r.resolve(ctx, lk, row, now)
	defer func() { endResolve(span, out) }()
	for _, a := range out.actions {
		r.metrics.actions.WithLabelValues(row.Vendor, a).Inc()
	}
	if out.err != nil {
		log.WarnContext(ctx, "resolver: row not resolved", "err", out.err, "actions", out.actions)
		if ok, after := retryable(out.err); ok && out.vendorFault {
			until := r.trip(row.Vendor, now, after)
			if until.After(out.next) {
				out.next = until.Add(jitter(r.opts.MinBackoff / 4))
			}
		}
	} else if lk != nil {
		r.heal(row.Vendor)
	}
	if out.settled {
		log.InfoContext(ctx, "resolver: row settled", "status", out.status, "actions", out.actions)
		return
	}
	if out.next.IsZero() {
		out.next = now.Add(r.backoff(row, now))
	}
	r.reschedule(out.journal(ctx), row, out.next)
}

// outcome is what resolve did to one row.
type outcome struct {
	actions []string
	settled bool
	status  ledger.Status
	// next is when to look again (zero: the row's backoff).
	next time.Time
	err  error
	// vendorFault is set when err came from the vendor (not the store or
	// the pager): only then may it pause the vendor.
	vendorFault bool
	// notes are the pass's findings for the row journal, written with the
	// next store write (journal.go).
	notes []ledger.JournalEntry
}

func (o *outcome) add(a string) { o.actions = append(o.actions, a) }

func (o *outcome) fail(err error) outcome {
	o.add(ActionError)
	o.err = err
	return *o
}

func (o *outcome) failVendor(err error) outcome {
	o.vendorFault = true
	return o.fail(err)
}

// resolve follows docs/architecture.md §7b for one due row (a row at attempt
// 0, never called, is only rescheduled):
//  1. a receipt id is known: retrieve the object; its state decides;
//  2. else look the row up by metadata_local_id; a miss counts as absence
//     only SearchLag after the last attempt could have reached the vendor;
//  3. absent, replay window open, request stored, last answer not a 5xx,
//     no attempt in flight: replay the exact request with the same key;
//  4. window closed (or nothing else left) and still not known: page once.
func (r *Resolver) resolve(ctx context.Context, lk Lookup, row ledger.Row, now time.Time) outcome {
	var out outcome
	if row.Status == ledger.StatusPending && row.Attempt == 0 {
		// No vendor call was ever granted (an approval that waits, or was
		// granted but not yet claimed; a work item no worker has taken):
		// nothing to look up, and a replay would be the very call a human
		// has to allow, or the worker's to make. The expiry job settles a
		// request; look again when it is due, or after the longest backoff.
		out.next = now.Add(r.opts.MaxBackoff)
		if a := row.Approval; a != nil && a.State == ledger.ApprovalRequested && a.ExpiresAt.After(now) {
			out.next = a.ExpiresAt.Add(jitter(r.opts.MinBackoff))
		}
		return out
	}
	inFlight := now.Before(row.PendingUntil)
	// A row the lookup cannot decide — the vendor keeps failing (a
	// restricted key, an unknown object kind) or its object never settles
	// — is paged once its replay window has been closed for MaxBackoff:
	// else nobody would hear of it.
	stuck := !inFlight && now.After(windowEnd(row).Add(r.opts.MaxBackoff))
	if endless(row) {
		// A window without end never closes: a lookup that keeps failing
		// is paged a day after the last attempt instead.
		stuck = !inFlight && now.After(lastAttempt(row).Add(24*time.Hour))
	}
	if lk == nil {
		if inFlight || now.Before(row.ReplayWindowUntil) {
			return out
		}
		return r.page(ctx, row, now, "no lookup for vendor "+row.Vendor, out)
	}

	if row.UpstreamReceiptID != "" {
		f, err := lk.Retrieve(ctx, row)
		out.finding(now, "retrieve "+row.UpstreamReceiptID, f, err)
		if err != nil {
			out = out.failVendor(fmt.Errorf("retrieve %s: %w", row.UpstreamReceiptID, err))
			if stuck {
				return r.page(ctx, row, now, "the vendor lookup keeps failing after the replay window", out)
			}
			return out
		}
		if f.Found {
			out.add(ActionFound)
			return r.settle(ctx, row, f, now, out)
		}
		// The receipt names nothing the vendor knows (a wrong id reported
		// by a runtime): fall back to the lookup by local id.
	}

	// Past this switch the row is absent at the vendor (or, for a vendor
	// without a lookup, the replay below is the lookup).
	f, err := lk.Find(ctx, row)
	if !errors.Is(err, ErrNoLookup) {
		out.finding(now, "search by local id "+row.MetadataLocalID, f, err)
	}
	switch {
	case errors.Is(err, ErrNoLookup):
	case err != nil:
		out = out.failVendor(fmt.Errorf("find %s: %w", row.MetadataLocalID, err))
		if stuck {
			return r.page(ctx, row, now, "the vendor lookup keeps failing after the replay window", out)
		}
		return out
	case f.Duplicate:
		// More than one object carries the local id: the duplicate side
		// effect already happened. No lag changes that; a replay would
		// only make it worse.
		out.add(ActionFound)
		return r.page(ctx, row, now, "a duplicate already exists: "+f.Detail, out)
	case f.Found:
		out.add(ActionFound)
		return r.settle(ctx, row, f, now, out)
	default:
		// lastAttempt is PendingUntil: a report ends the lease at the
		// report's time, an unreported attempt cannot outlive its lease, so
		// no vendor object of this key can be younger. Search may not show it
		// until the lookup's lag after that.
		visibleBy := lastAttempt(row).Add(r.searchLag(lk))
		if now.Before(visibleBy) {
			out.next = visibleBy.Add(jitter(r.opts.MinBackoff / 4))
			return out
		}
		if rt, ok := lk.(Retained); ok && rt.Retention() > 0 && now.Sub(row.FirstSeenAt) > rt.Retention() {
			// The vendor keeps objects only so long: a miss proves nothing.
			return r.page(ctx, row, now, "older than the vendor's retention, so a lookup miss proves nothing", out)
		}
		out.add(ActionAbsent)
	}
	if inFlight {
		// The runtime's attempt still holds its lease: never replay or page
		// under it; look again when it ends.
		out.next = row.PendingUntil.Add(jitter(r.opts.MinBackoff / 4))
		return out
	}

	frozen := r.opts.Frozen != nil && r.opts.Frozen(row.Tenant, row.Tool, row.ToolClass)
	// A row paged already (a replay the vendor refused, a duplicate) is
	// never replayed again: a human has it.
	if row.Request != nil && ledger.RetryAllowed(row, now) && !frozen && row.PagedAt.IsZero() {
		f, err := lk.Replay(ctx, row)
		out.replayed(now, f, err)
		if err != nil {
			if code := httpStatusOf(err); code >= 500 {
				// The vendor stored a 5xx under the key and will replay it:
				// the row's last answer says so, and RetryAllowed stops
				// every later replay, on every replica.
				ev := ledger.Evidence{Source: ledger.SourceResolver, HTTPStatus: code, At: now}
				if _, _, aerr := r.store.Apply(ctx, row.Tenant, row.Key, ev); aerr != nil {
					return out.fail(fmt.Errorf("record replay answer %d: %w", code, aerr))
				}
			}
			return out.failVendor(fmt.Errorf("replay: %w", err))
		}
		out.add(ActionReplayed)
		if f.Page != "" {
			return r.page(ctx, row, now, f.Page, out)
		}
		if f.Found || f.Status != "" {
			return r.settle(ctx, row, f, now, out)
		}
		return out
	}
	if now.Before(row.ReplayWindowUntil) && (frozen || !endless(row)) {
		// Not replayable (no request stored, a stored 5xx, not an
		// idempotent tool, frozen): wait for a webhook, a thaw or the
		// window's end. A window without end (an id the client chose)
		// would be waited on forever: only a thaw is worth waiting for.
		out.next = minTime(now.Add(r.backoff(row, now)), row.ReplayWindowUntil.Add(jitter(r.opts.MinBackoff/4)))
		return out
	}
	out.note(now, ledger.NoteWindowExpired, "the replay window ended "+row.ReplayWindowUntil.UTC().Format(time.RFC3339)+" with the row still "+string(row.Status))
	return r.page(ctx, row, now, "still "+string(row.Status)+" after the replay window", out)
}

// searchLag is how long after the last attempt a miss of lk counts as
// absence: the lookup's own (a profile's min_age), else Options.SearchLag.
func (r *Resolver) searchLag(lk Lookup) time.Duration {
	if l, ok := lk.(Lagged); ok {
		return l.SearchLag()
	}
	return r.opts.SearchLag
}

// windowEnd is when the row's window closed for the "still undecided"
// pages: its replay window, but never before its last attempt (a vendor
// without a window gets MaxBackoff after the attempt, not none).
func windowEnd(row ledger.Row) time.Time {
	if la := lastAttempt(row); la.After(row.ReplayWindowUntil) {
		return la
	}
	return row.ReplayWindowUntil
}

// endless reports whether the row's replay window has no practical end
// (vendors.Forever: the vendor took our id as the object's id).
func endless(row ledger.Row) bool {
	return row.ReplayWindowUntil.Sub(row.FirstSeenAt) >= 50*365*24*time.Hour
}

// settle applies a finding to the row through the ledger's transition and
// outbox path, with source resolver.
func (r *Resolver) settle(ctx context.Context, row ledger.Row, f Finding, now time.Time, out outcome) outcome {
	ev := ledger.Evidence{
		Source: ledger.SourceResolver, Status: f.Status, ReceiptID: f.ReceiptID,
		Amount: f.Amount, Currency: f.Currency, Note: f.Detail, At: now,
	}
	updated, ch, err := r.store.Apply(out.journal(ctx), row.Tenant, row.Key, ev)
	if err != nil {
		return out.fail(fmt.Errorf("apply %s: %w", f.Status, err))
	}
	r.metrics.change(ch)
	if !updated.Status.Open() {
		out.settled, out.status = true, updated.Status
		return out
	}
	for _, a := range ch.Alerts {
		if a == ledger.AlertMismatch {
			// The vendor holds an object that disagrees with what the
			// runtime meant to do: a human must look, now.
			return r.page(ctx, updated, now, "vendor object disagrees with the expected amount", out)
		}
	}
	if now.After(windowEnd(updated).Add(r.opts.MaxBackoff)) && !now.Before(updated.PendingUntil) {
		return r.page(ctx, updated, now, "the vendor object has not settled long after the replay window", out)
	}
	return out // progress: the receipt is stored, look again later
}

// page pages a human for an open row, once. Trigger comes first and is
// idempotent by dedup key; Escalate then records paged_at and the escalated
// event in one transaction. If Trigger fails the row stays unpaged and is
// tried again next pass; if Escalate fails after a Trigger, the next pass
// triggers again, which PagerDuty folds into the open alert.
func (r *Resolver) page(ctx context.Context, row ledger.Row, now time.Time, why string, out outcome) outcome {
	if !row.PagedAt.IsZero() {
		out.next = now.Add(r.opts.MaxBackoff).Add(-jitter(r.opts.MaxBackoff / 4))
		return out
	}
	p := paging.Page{
		DedupKey: paging.DedupKey(row.Tenant, row.Key),
		Summary: fmt.Sprintf("reconciler: %s %s call for tenant %s is %s (%s); check the vendor before any retry",
			row.Vendor, row.Tool, row.Tenant, row.Status, why),
		Source:        r.opts.Source,
		Severity:      paging.SeverityError,
		CustomDetails: details(row),
	}
	pctx, cancel := context.WithTimeout(ctx, r.opts.PageTimeout)
	pctx, span := tracing.StartPage(pctx, r.tracer, tracing.PageTrigger, p.DedupKey, row.Traceparent)
	err := r.opts.Pager.Trigger(pctx, p)
	tracing.End(span, err, pageUndelivered)
	cancel()
	if err != nil {
		out.add(ActionError)
		out.err = fmt.Errorf("page: %w", err)
		out.next = now.Add(jitter(r.opts.MinBackoff))
		return out
	}
	cur, first, err := r.escalate(out.journal(ctx, ledger.JournalEntry{Kind: ledger.JournalPage, Outcome: ledger.NotePaged, Detail: why, At: now}), row, now)
	if err != nil {
		return out.fail(fmt.Errorf("escalate: %w", err))
	}
	switch {
	case first:
		out.add(ActionPaged)
	case !cur.Status.Open():
		// The row settled between the due snapshot and the trigger: its
		// settling event carries no PagedAt, so nobody else will resolve
		// the alert just opened. Best effort; a human sees it settled.
		rctx, span := tracing.StartPage(ctx, r.tracer, tracing.PageResolve, p.DedupKey, row.Traceparent)
		err := r.opts.Pager.Resolve(rctx, p.DedupKey)
		tracing.End(span, err, pageUndelivered)
		if err != nil {
			r.logger.WarnContext(ctx, "resolver: resolve of a page for a settled row failed", "tenant", row.Tenant, "key", row.Key, "err", err)
		}
		out.settled, out.status = true, cur.Status
		return out
	}
	out.next = now.Add(r.opts.MaxBackoff).Add(-jitter(r.opts.MaxBackoff / 4))
	return out
}

// escalate records a delivered page on the row, trying a few times: until
// it lands, the row carries no paged_at, so a webhook that settles it
// meanwhile publishes an event the page resolver ignores, and the alert
// just opened would stay open.
func (r *Resolver) escalate(ctx context.Context, row ledger.Row, now time.Time) (cur ledger.Row, first bool, err error) {
	bo := backoff.WithContext(backoff.WithMaxRetries(
		backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond)), 2), ctx)
	err = backoff.Retry(func() error {
		var err error
		cur, first, err = r.store.Escalate(ctx, row.Tenant, row.Key, now)
		return err
	}, bo)
	return cur, first, err
}

// details are the trace fields a human needs to find the row and the call;
// never the request body (it may hold customer data).
func details(row ledger.Row) map[string]any {
	d := map[string]any{
		"tenant": row.Tenant, "key": row.Key, "run_id": row.RunID, "tool": row.Tool,
		"vendor": row.Vendor, "tool_class": string(row.ToolClass), "status": string(row.Status),
		"metadata_local_id": row.MetadataLocalID, "attempt": row.Attempt,
		"first_seen_at": row.FirstSeenAt.Format(time.RFC3339),
	}
	if row.ToolCallID != "" {
		d["tool_call_id"] = row.ToolCallID
	}
	if row.UpstreamReceiptID != "" {
		d["receipt_id"] = row.UpstreamReceiptID
	}
	if row.LastHTTPStatus != 0 {
		d["last_http_status"] = row.LastHTTPStatus
	}
	if !row.ReplayWindowUntil.IsZero() {
		d["replay_window_until"] = row.ReplayWindowUntil.Format(time.RFC3339)
	}
	if row.Request != nil {
		d["request"] = row.Request.Method + " " + row.Request.Path
	}
	return d
}

// reschedule moves the row's next check; a failure only means the row is
// looked at again next pass.
func (r *Resolver) reschedule(ctx context.Context, row ledger.Row, next time.Time) {
	if ctx.Err() != nil {
		// The vendor's time is up, not the store's: give the write its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
	}
	if err := r.store.Reschedule(ctx, row.Tenant, row.Key, next); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		r.logger.Warn("resolver: reschedule failed", "tenant", row.Tenant, "key", row.Key, "err", err)
	}
}

// backoff grows with the time since the row's last attempt — half of it,
// within [MinBackoff, MaxBackoff], jittered ±25% — so a fresh row is looked
// at often and an old one rarely, with no counter stored anywhere.
func (r *Resolver) backoff(row ledger.Row, now time.Time) time.Duration {
	d := now.Sub(lastAttempt(row)) / 2
	d = min(max(d, r.opts.MinBackoff), r.opts.MaxBackoff)
	return d - d/4 + jitter(d/2)
}

// lastAttempt is the latest time the row's last attempt could have reached
// the vendor: the end of its lease (PendingUntil; a report sets it to the
// report's time).
func lastAttempt(row ledger.Row) time.Time {
	if row.PendingUntil.IsZero() {
		return row.FirstSeenAt
	}
	return row.PendingUntil
}

// paused reports whether the vendor's circuit is open at now.
func (r *Resolver) paused(vendor string, now time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	until := r.pausedUntil[vendor]
	return until, now.Before(until)
}

// trip records a retryable vendor failure and pauses the vendor: capped
// exponential in the failures in a row, full jitter, at least the vendor's
// Retry-After.
func (r *Resolver) trip(vendor string, now time.Time, after time.Duration) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.fails[vendor]
	r.fails[vendor] = n + 1
	ceil := r.opts.MinBackoff
	for i := 0; i < n && ceil < r.opts.MaxBackoff; i++ {
		ceil *= 2
	}
	ceil = min(ceil, r.opts.MaxBackoff/4)
	d := max(ceil/2+jitter(ceil/2), min(after, r.opts.MaxBackoff))
	until := now.Add(d)
	if until.After(r.pausedUntil[vendor]) {
		r.pausedUntil[vendor] = until
	}
	return r.pausedUntil[vendor]
}

// heal closes the vendor's circuit after a call that worked.
func (r *Resolver) heal(vendor string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.fails, vendor)
	delete(r.pausedUntil, vendor)
}

// jitter is uniform in [0, d].
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
