// Package natstest gives tests an embedded NATS server with JetStream on a
// random loopback port (Start), a client connected the way the service
// connects (Connect), the service's default stream (EnsureStream; all three
// at once: JetStream), numbered test events (Event), and a self-signed
// certificate for a TLS listener (SelfSignedCert). Every server
// and connection is closed when the test ends.
//
// Imports: events, events/natsserver and ledger. Only _test.go files import it
// (scripts/importcheck.sh fails any other build that does); so that
// events' own tests can use it, they are in package events_test.
//
// Concurrency: it starts no goroutines of its own; its functions are safe
// for concurrent use by parallel tests.
package natstest
