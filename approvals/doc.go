// Package approvals runs the approval gate's background work
// (docs/architecture.md §11): the Expirer, which expires approval requests whose
// time ran out (approvals.ttl, default 24 h), and the Notifier, which asks
// a human through the pagers when a request is made and closes the alert
// once it is decided.
//
// The Expirer walks the store's index of open approvals by expiry
// (ledger.Approvals.ListApprovals with DueBy), never the rows, and expires
// each with ledger.Approvals.DecideApproval, a conditional update of one
// row in one transaction (row, outbox record): expiring an approval that a
// human, a claim or another replica's expirer decided meanwhile changes
// nothing. So every replica may run one, with no lease and no leader.
//
// The Notifier is fed by a durable JetStream consumer of the approval
// events (<prefix>.*.*.approval_requested, approved, denied,
// approval_expired) that all replicas share; it runs outside every store
// transaction, after the commit, and is idempotent by the dedup key
// paging.ApprovalDedupKey ("recon:<tenant>:<key>:approval"): a trigger
// delivered twice lands on one alert, and the resolve of a decided request
// closes it.
//
// With a TracerProvider in their options, each expiry is an approval span
// and each pager asked a page span, new traces linked to the row's claim
// (tracing.go).
//
// Imports: ledger, paging, internal/tracing, nats.go/jetstream, the
// OpenTelemetry API and the standard library.
//
// Concurrency: Expirer.Run and Notifier.Consume each own the loop of
// their caller's goroutine and return when its context ends; Pass and
// HandleEvent may be called from any goroutine.
package approvals
