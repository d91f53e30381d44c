// Package storetest is the conformance suite every ledger.Store runs:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) ledger.Store {
//			s := open(t) // a fresh, empty store opened with ledger.DefaultPolicy()
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// It drives a store only through the ledger.Store interface, plus
// CheckConsistency(ctx) error when the store has it, and checks the contract
// written in docs/architecture.md §4 and §7: the claim decision
// table, compensation, the transition table and outcome classification, a
// runtime's result kept byte for byte, ingest (dedupe, orphans, joins),
// escalation, scheduling, listing, the outbox, retention (§15: what it
// deletes, in what order, and what it must keep), single-winner claims under contention, index consistency after
// random operations and a linearizability check with porcupine, whose
// sequential model is the ledger's own pure rules.
//
// Time is never slept on: every input carries its own time (Claim.At,
// Outcome.At, Evidence.At, Delivery.At, now), and every time the suite uses
// has whole-microsecond precision, so a PostgreSQL timestamptz round-trips it.
//
// What the suite pins down where the Store docs leave room:
//   - List orders by first_seen_at descending, then key descending.
//   - Due returns rows with next_check_at at or before now, earliest first;
//     a limit of 0 returns nothing.
//   - Close twice must not panic (the Close test closes the store it opened,
//     and the open func's cleanup may close it again).
//
// Imports: the standard library, ledger and porcupine (a test dependency).
// Concurrency: Run's subtests are sequential; a few of them hammer one store
// from many goroutines, which must be safe for any Store.
package storetest
