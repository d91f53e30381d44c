// Package registry keeps each tenant's tool registry (docs/architecture.md §11)
// in memory, so the claim API can ask "is this tool registered, with which
// vendor and class, and how far may this claim act on its own?" on every
// claim without a store round trip.
//
// A Cache loads every ledger.Tool from the store when asked (Load, at
// start-up), reloads them every Options.Interval (default 2 s) while Run
// runs, and applies a change made through it (Put, Delete) to memory as
// soon as the store has made it durable: on this replica a registration
// holds from the moment Put returns, and replicas sharing a PostgreSQL
// store see it within one interval, as they see the kill switch. A reload
// that fails keeps the last loaded registry and is logged. Get and List
// read the store, so the API lists what is stored, not what this replica
// last loaded.
//
// Each entry's policy is compiled once per registry change: when Put
// stores a new version, or when a reload finds one, and reused by every
// claim until the next (Decide). Put refuses a policy that does not
// compile before it reaches the store; a stored one that does not compile
// on this build (written by another) sends every claim of its tool to
// approval, and is logged.
//
// Imports: ledger, policy, internal/pollcache (the snapshot, its lock and
// the reload loop, shared with the kill switch) and the standard library.
//
// Concurrency: every method is safe for concurrent use. Lookup reads an
// immutable snapshot through an atomic pointer and never blocks. Loads and
// changes are serialised by one semaphore, held across the store call, so a
// reload that read the store before a local change cannot install its
// older view after the change. Run is the only goroutine the package has;
// its caller owns it and stops it by cancelling its context.
package registry
