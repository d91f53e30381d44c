// Package natsserver runs the embedded NATS server with JetStream: the
// single-node default of `reconciler serve` when no --nats-url is given,
// and the bus of the drills, the load program and the tests.
//
// Start listens on 127.0.0.1 unless Options.Listen (--nats-listen) names
// another address, opens no cluster, leaf, gateway or monitoring port,
// installs no signal handlers, and reports a taken port as one clear line
// ("nats listen 127.0.0.1:4222: address already in use"). DefaultOptions
// are the service's options.
//
// # Authentication
//
// With Options.Users the server admits only those nkey users, each bounded
// by its Permissions (the service passes events.TenantPermissions: a
// tenant's runtime reads its own events and publishes nothing), and the
// service's own user, whose key pair Start makes and keeps in memory: the
// service connects in-process (ServiceURL, ServiceOptions), so its
// credential never leaves the process and needs no TLS. Without users the
// server admits anyone, which Start allows on a loopback address only
// (ErrOpenListener): that is the zero-config single node, where only local
// processes can reach the bus. Options.CertFile and KeyFile make the
// listener TLS only.
//
// It is its own package so that what links events without running a server
// (the client SDK's Await) does not link nats-server.
//
// Imports: nats-server, nats.go (the service's in-process options) and
// nkeys; no project package (the stream, the relay and the permission set
// on top of the server are events').
//
// # Durability: why the embedded server runs with SyncAlways
//
// JetStream's file store writes a message to the kernel before it sends the
// PubAck, but fsyncs only every SyncInterval (2 min by default). A SIGKILL
// loses nothing either way (the page cache survives the process;
// TestAckedEventsSurviveSIGKILL checks both modes), but a power loss or
// kernel crash can lose up to two minutes of acknowledged messages. The
// relay deletes an outbox record as soon as the PubAck arrives, so such a
// loss would be silent: the ledger has forgotten the event and the stream
// never got it. With SyncAlways the server fsyncs each write before it acks,
// which closes that gap. DefaultOptions sets it.
//
// Its cost, measured with events' BenchmarkPublishAck and BenchmarkRelay
// (go test -run '^$' -bench . -benchtime 1s -count 3 ./events/, 2 shared
// vCPUs, ext4 on a virtual disk, six engineers' jobs running, so the spread
// is wide), per event published and acknowledged:
//
//	                           SyncAlways                default (2 min sync)
//	one at a time (relay path) 1.4-2.7 ms  (370-710/s)   0.13-0.18 ms (5.6k-7.8k/s)
//	100 in flight (async)      2.0-4.6 ms  (220-490/s)   0.03-0.15 ms (6.9k-40k/s)
//	Relay end to end           1.6-4.2 ms  (240-630/s)   0.09-0.22 ms (4.6k-11k/s)
//
// So SyncAlways costs 10-20 times the per-event time and caps the relay at a
// few hundred events a second on this disk, and pipelining does not help (each
// write is synced on its own). That is ample: events are resolutions of
// agents' write tool calls, tens a second at the most, each already behind
// a vendor round trip of hundreds of milliseconds, and the bbolt ledger pays
// one fsync per commit anyway. Two milliseconds of relay lag are the price of
// never losing an acknowledged event. An external NATS (--nats-url) is the
// operator's to configure; set sync_interval: always there too, or run
// replicated streams (R3), where acks wait for a quorum.
//
// # Concurrency
//
// Start blocks until the server accepts clients (or Options.ReadyTimeout).
// A Server's methods are safe from any goroutine; Shutdown may be called more
// than once, and Done reports the end of a shutdown that outlived its
// context.
package natsserver
