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
// With Options.Accounts the server runs the accounts configuration it
// renders (the service passes events.AccountLayout's ServerConfig: the
// streams in the service's account, each tenant's nkey users in the
// tenant's own account, which imports only its subjects) around the
// service's own user, whose key pair Start makes and keeps in memory: the
// service connects in-process (ServiceURL, ServiceOptions), so its
// credential never leaves the process and needs no TLS. Without it the
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
// # Durability: why the embedded server syncs every second
//
// JetStream's file store writes a message to the kernel before it sends
// the PubAck and fsyncs every SyncInterval (2 min by default), or before
// every PubAck with SyncAlways. A SIGKILL loses nothing either way (the
// page cache survives the process; TestAckedEventsSurviveSIGKILL checks
// both modes); a power loss can lose what was acknowledged since the last
// sync. DefaultOptions syncs every DefaultSyncInterval (1 s;
// TestDefaultOptionsSync), and the relay keeps each outbox record until
// SyncedAfter (3 s) past its PubAck and a ping the server answered after
// that, so the outbox still holds whatever a power loss took from the
// stream, and the restart publishes it again (events/doc.go has the whole
// argument and its tests). SyncAlways would need neither, but costs what
// this measures, per event published and acknowledged
// (go test -run '^$' -bench 'PublishAck|Relay' -benchtime 20000x -count 3
// ./events/, 2 shared vCPUs, ext4 on a virtual disk, load 1.6-3; the three
// runs' range):
//
//	                              SyncAlways     sync every 1 s   every 2 min
//	one publish + ack at a time   0.9k-1.3k/s    11k-16k/s        12k-15k/s
//	256 in flight (async)         1.4k-1.6k/s    28k-56k/s        40k-46k/s
//	relay, one at a time          1.2k-1.8k/s    11k-12k/s        11.5k-12k/s
//	relay, window of 256          3.5k-3.6k/s    54k-57k/s        59k-60k/s
//
// With SyncAlways the server syncs each write on its own, so a window
// hardly helps (1.2-2x); it caps the relay at a few thousand events a
// second on this disk, below the 3.5k-12k durable webhooks a second the
// service ingests (BENCHMARKS.md). A group fsync through JetStream's atomic
// batch publish would sync once per batch, but a batch that holds a
// message the stream already has fails whole, and the relay's restart
// publishes exactly such messages again. Syncing every second costs
// nothing measurable next to the 2-minute default, and the window makes
// the relay several times faster than ingest. An external NATS (--nats-url) is
// the operator's: events.synced_after (cmd/reconciler) says when its
// server has synced; with sync_interval: always or a replicated stream
// (R3, acks wait for a quorum) it is 0.
//
// # Concurrency
//
// Start blocks until the server accepts clients (or Options.ReadyTimeout).
// A Server's methods are safe from any goroutine; Shutdown may be called more
// than once, and Done reports the end of a shutdown that outlived its
// context.
package natsserver
