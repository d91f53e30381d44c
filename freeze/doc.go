// Package freeze keeps the kill switch (docs/architecture.md §4, issue 5) in
// memory, so the claim API can ask "is this tool frozen for this tenant?"
// on every claim without a store round trip.
//
// A Cache loads every ledger.Freeze from the store when asked (Load, at
// start-up), reloads them every Options.Interval (default 2 s) while Run
// runs, and applies a change made through it (Put, Delete) to memory as
// soon as the store has made it durable: on this replica a freeze holds
// from the moment Put returns, and replicas sharing a PostgreSQL store see
// it within one interval. A reload that fails keeps the last loaded set (a
// kill switch must not thaw because the database blinked) and is logged.
//
// Imports: ledger, internal/pollcache (the snapshot, its lock and the
// reload loop, shared with the tool registry) and the standard library.
//
// Concurrency: every method is safe for concurrent use. Frozen and
// Snapshot read an immutable snapshot through an atomic pointer and never
// block. Loads and changes are serialised by one mutex, held across the
// store call, so a reload that read the store before a local change cannot
// install its older view after the change. Run is the only goroutine the
// package has; its caller owns it and stops it by cancelling its context.
package freeze
