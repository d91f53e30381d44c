// Package fakestripe is a Stripe API for tests, served by httptest, that
// behaves like Stripe where this module depends on it: a write really
// commits an object before it answers; the answer is stored under the
// request's Idempotency-Key, and a repeat of the key with the same
// parameters gets that stored answer (a stored error too) with
// Idempotent-Replayed: true and creates nothing, while a repeat with other
// parameters is refused; Search by metadata sees an object only once the
// index has caught up (Options.SearchLag); objects are retrieved by id,
// refunds listed by parent, events listed newest first; a request without
// an accepted secret key gets 401.
//
// Misbehaviour is asked for explicitly: Inject makes the next writes go
// wrong the way production does (commit then hang, commit then drop the
// connection, a stored 500, a 409 naming the object, a declined card, a
// 429), Fail answers the next requests (or all) with a status.
// Requests records what arrived, so a test can assert what the vendor saw.
//
// Imports: the standard library only. Only _test.go files import it
// (scripts/importcheck.sh fails any other build that does); the drills'
// fault-injecting vendor of `reconciler drill` is drill.Vendor, product
// code.
//
// Concurrency: a Stripe is safe for concurrent use. Its only goroutines are
// the test server's handlers; a held answer ends when the client gives up or
// the test ends (New registers the cleanup).
package fakestripe
