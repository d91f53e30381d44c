// Package pollcache is the part the kill switch (freeze) and the tool
// registry (registry) share: an immutable snapshot that readers load
// through an atomic pointer without blocking, one lock that serialises the
// writers replacing it (a reload from the store, a change made through the
// cache), and Run, which reloads every interval and keeps the last
// snapshot when a reload fails. What a snapshot holds and how a load builds
// it stay with each cache.
//
// The lock is a semaphore rather than a mutex so that a request waiting
// for it gives up when its context ends; it is held across the store call,
// so a reload that read the store before a local change cannot install its
// older view after the change.
//
// Imports: ledger (ErrUnavailable), golang.org/x/sync (the semaphore) and
// the standard library.
//
// Concurrency: every method is safe for concurrent use. Run is the only
// goroutine; its caller owns it and stops it by cancelling its context.
package pollcache
