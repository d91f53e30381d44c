// Package resolver closes ledger rows that no webhook closed: the periodic
// resolve job of docs/architecture.md §7b, its vendor lookups (Stripe with
// stripe-go v79, PayPal with net/http, and Profiled: any vendor described
// by a vendors.Profile, with net/http) and the escalation to a human.
//
// # A pass
//
// Pass takes up to Limit rows from the store's due index (Store.Due is
// O(limit): settled rows are never scanned), groups them by vendor and works
// each vendor's rows in its own goroutines under its own deadline
// (VendorTimeout), so a vendor that hangs or fails costs the others nothing.
// For each row, in order:
//
//  1. A receipt id is known: Lookup.Retrieve; the object's state decides.
//  2. Else Lookup.Find by metadata_local_id (Stripe Search; refunds by
//     listing the parent; List Events where Search is unavailable). A miss
//     counts as absence only SearchLag after the row's last attempt could
//     have reached the vendor. That instant is row.PendingUntil: reporting
//     an outcome sets it to the report's time, and an attempt that was never
//     reported cannot outlive its lease, so no vendor object of this key is
//     younger. (UpdatedAt is not used: alerts, receipts and pages move it.)
//  3. Absent, replay window open (ledger.RetryAllowed: write_idempotent,
//     before ReplayWindowUntil, last answer not a 5xx), a request envelope
//     stored and no attempt in flight: Lookup.Replay sends the exact request
//     with the row key as the idempotency key, set explicitly. A replay
//     answered with a 5xx is recorded on the row (Store.Apply with the
//     status as evidence), so RetryAllowed stops every later replay on
//     every replica (Stripe stored the 5xx and would only replay it). PayPal has no lookup by custom_id: its Find returns
//     ErrNoLookup and the same-PayPal-Request-Id replay is the lookup.
//  4. Window closed and still not known (or the vendor's object disagrees
//     with the row's expect): page once.
//
// For a profiled vendor (profiled.go) the same steps run on the profile's
// data (a lookup may page, keep the matches carrying the row's local id
// and group them into objects: findings.go): a lookup with more than one
// object is a duplicate that already happened (Finding.Duplicate: page at once, never replay); a miss counts
// as absence only after the lookup's min_age (Lagged) and proves nothing
// for a row older than its retention (Retained: page); a replay answer the
// profile reads as `page` (Finding.Page) pages once and leaves the row
// open, and a row paged for any reason is never replayed again; `retry`
// replays on a later pass without recording the answer (Adyen's
// Transient-Error). A window without end (an id the client chose) is not
// waited on: a row that cannot be replayed is paged once absence is
// known.
//
// Every finding goes through Store.Apply with Evidence{Source: resolver}:
// the same transition rules and the same outbox as a webhook. A row that
// stays open is rescheduled: its backoff grows with the time since its last
// attempt (half of it, within [MinBackoff, MaxBackoff], jittered), so no
// counter is stored. A 429, 5xx or timeout also pauses the vendor (capped
// exponential backoff with full jitter, at least its Retry-After): the
// vendor's remaining rows are pushed past the pause without a call, so a
// 429 storm costs a few requests per pass, not one per row, and a paused
// vendor's rows never clog the head of the due index. Lookups pace their
// calls with golang.org/x/time/rate token buckets (Stripe: Search 20/s and
// API 100/s by default) and time-box each call (CallTimeout).
//
// # Many replicas
//
// When the Store given to New also implements DueClaimer (ledger/postgres
// does, with SELECT … FOR UPDATE SKIP LOCKED), Pass takes its rows with
// ClaimDue, which moves their next check to now+Options.Lease in the same
// transaction: the resolvers of N replicas share the due rows without a
// leader, and no two work one row within a lease. The lease (default
// VendorTimeout plus twice the store timeout) outlasts a pass's work on
// the row; a replica that dies mid-pass leaves its rows due again when the
// lease ends. Without a DueClaimer (bbolt: one process) Pass reads Due.
//
// # Paging once, reliably
//
// The design asks for paged_at to be set in the same transaction that
// records the page, and for a page to be retried until it is accepted,
// never duplicated. Store.Escalate sets paged_at and writes the escalated
// outbox event in one transaction, once. The pager call cannot join that
// transaction, so the order is: Pager.Trigger first, then Escalate. If the
// trigger fails the row stays unpaged and the next pass triggers again; if
// Escalate fails after a delivered trigger, the next pass triggers again
// too — harmless, because every trigger carries dedup_key "recon:<tenant>:<key>"
// and PagerDuty folds a trigger for an open alert into that alert. The
// other order (Escalate, then Trigger) would lose the page for good when
// the trigger failed, since the row would already say paged. A row whose
// PagedAt is set is never triggered again.
//
// When a paged row settles later (a late webhook, a human, the resolver),
// its settling event carries PagedAt; PageResolver.HandleEvent, fed from a
// durable JetStream consumer of recon.*.*.succeeded and
// recon.*.*.failed_poison (PageResolver.Consume runs one: ack on success,
// redelivery on failure), sends the pager's resolve for the same dedup key.
//
// # Traces
//
// With Options.TracerProvider each row of a pass is a resolve span (a new
// trace linked to the row's claim, with its attributes and the actions
// taken) and each page sent or resolved a page span; TracePages does the
// same for the PageResolver (tracing.go).
//
// # Imports and concurrency
//
// resolver imports ledger, paging and internal/tracing, stripe-go v79,
// x/time/rate, nats.go's jetstream (for Consume), the Prometheus client
// and the OpenTelemetry API; it declares the Store, Pager and Lookup interfaces it
// consumes. A Resolver is safe for concurrent use; Run owns the loop (one
// pass at a time; Wake asks for the next one now rather than at the tick:
// a webhook hint made a row due) and returns when its context ends. Pass starts one
// goroutine per vendor and Workers goroutines per vendor, and waits for all
// of them before it returns. Consume runs until its context ends and
// returns after its last handler. Stripe and PayPal lookups are safe for
// concurrent use and start no goroutines. Metrics:
// reconciler_resolver_cycle_seconds and
// reconciler_resolver_actions_total{vendor,action}.
package resolver
