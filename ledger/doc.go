// Package ledger is the domain of reconciler: the idempotency ledger row, its
// statuses, the claim decisions, the transition rules, the outcome
// classification, key minting and the intent fingerprint, and the Store
// interface that every storage backend implements.
//
// It imports only the standard library (make lint checks this), so the rules
// read the same for every store and every caller. The functions here are pure:
// they take the current time as an argument and never block, so a store can
// run them inside a transaction and re-run them when a group commit retries.
//
// Concurrency: the types are plain values; Store implementations document
// their own guarantees (every Store must pass ledger/storetest).
package ledger
