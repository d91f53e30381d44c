// Package natstest gives tests an embedded NATS server with JetStream on a
// random loopback port (Start), a client connected the way the service
// connects (Connect), the service's default stream (EnsureStream; all three
// at once: JetStream), numbered test events (Event), and a self-signed
// certificate for a TLS listener (SelfSignedCert). Every server
// and connection is closed when the test ends.
//
// StartCluster runs a JetStream cluster of node processes instead, for the
// fault tests (a node SIGKILLed and started again on its store): each node
// is the test binary re-executed, so a package that uses it calls
// RunNodeIfAsked first in its TestMain.
//
// Imports: events, events/natsserver and ledger. Only _test.go files import it
// (scripts/importcheck.sh fails any other build that does); so that
// events' own tests can use it, they are in package events_test.
//
// Concurrency: a Cluster starts one goroutine per node process, which
// waits for the process and ends with it; otherwise the package starts no
// goroutines. Its functions are safe for concurrent use by parallel tests,
// and a Cluster's methods by the goroutines of one test.
package natstest
