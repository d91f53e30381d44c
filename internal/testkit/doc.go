// Package testkit holds the helpers the module's tests share: Clock, a fake
// clock tests move by hand; Eventually, the polling helper tests use
// instead of sleeps; SyncBuffer, a buffer that logs written from many
// goroutines can be read from while they write; and CutProxy, a TCP proxy
// that cuts a connection at a chosen moment (an answer lost on the way).
//
// Imports: the standard library only, so the tests of every package may use
// it, ledger's included. Only _test.go files import it; scripts/importcheck.sh
// fails any other build that does.
//
// Concurrency: a Clock and a SyncBuffer are safe for concurrent use.
// Eventually polls on the calling goroutine and starts none.
package testkit
