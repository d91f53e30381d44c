// Package events moves resolution events from the ledger's outbox to NATS
// JetStream and lets agent runtimes wait for them.
//
//   - StartServer runs an embedded NATS server with JetStream (the single-node
//     default when no --nats-url is given). It listens on 127.0.0.1 unless
//     --nats-listen names another address (the server has no auth, so that
//     exposes it: keep it on loopback), opens no cluster, leaf, gateway or
//     monitoring port, installs no signal
//     handlers, and reports a taken port as one clear line
//     ("nats listen 127.0.0.1:4222: address already in use").
//   - EnsureStream creates or updates stream RECON: subjects recon.>, file
//     storage, a 1 h duplicates window (never longer than MaxAge).
//   - Relay publishes outbox records in commit order on
//     recon.<tenant>.<run_id>.<status> with Nats-Msg-Id <tenant>:<key>:<status>, and
//     deletes a record only after its PubAck (a duplicate ack counts).
//   - Await returns the first resolution (succeeded, failed_poison,
//     escalated) of a key, from the stream and, with WithLedger, from a poll
//     of the ledger so a lost notification cannot strand a paused run.
//
// Imports: ledger (domain types), internal/promreg, nats.go/jetstream,
// nats-server, prometheus and cenkalti/backoff. Never the stores or other adapters; cmd/reconciler
// wires a store's Outbox into NewRelay.
//
// # Ordering and delivery
//
// The relay publishes one record at a time and waits for its PubAck before
// the next, so the stream holds events in commit order and record n+1 is
// never on the stream before n. A record whose AckEvents fails (or whose
// relay dies between PubAck and AckEvents) is published again; JetStream's
// duplicates window drops it and answers PubAck.Duplicate, so within the 1 h
// window every event is stored exactly once. While NATS or the store is
// unavailable the records stay in the outbox, Healthy returns the error (for
// /readyz), and the relay retries after a jittered exponential backoff
// (100 ms doubling to 10 s); notifications do not cut the wait short.
// PublishAsync was measured (below) and is not used: it buys nothing with
// SyncAlways, and a timed-out message ahead of acked ones would put events on
// the stream out of order.
//
// # Many replicas
//
// When the Outbox given to NewRelay also implements LeasingOutbox
// (ledger/postgres does, with SELECT … FOR UPDATE SKIP LOCKED), each pass
// leases a batch for RelayOptions.Lease (30 s) instead of reading
// PendingEvents, so the relays of N replicas share the outbox without a
// leader and a record is handed to one relay at a time. The store never
// hands out a row's record while an earlier record of that row is leased,
// and the relay starts a publish only while PublishTimeout still fits in
// its lease, so every publish of a lease ends before anyone else can take
// the row's next record: each row's events stay in commit order across
// relays. After a failed publish the relay keeps the rest of its batch and
// retries it after its backoff while PublishTimeout still fits in the
// lease. Records a relay leaves unpublished otherwise (a crash, a lease
// running out) are handed out again when the lease ends; a record
// published but not acked is published again and JetStream drops the
// duplicate. Relays' clocks (RelayOptions.Now) must agree to well within a
// lease.
//
// A record that can never be published (a tenant or run_id that is not a
// subject token) is dropped with an error log and counted as
// result="invalid": keeping it would block every later event, and the row
// itself still holds the truth.
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
// which closes that gap. DefaultServerOptions sets it.
//
// Its cost, measured with BenchmarkPublishAck and BenchmarkRelay
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
// Relay.Run owns its loop and returns when its context is done, after the
// publish in flight (bounded by PublishTimeout) and the delete of the records
// already acknowledged; one Run at a time. Healthy is safe to call from any
// goroutine. Await is safe to call concurrently; each call owns one ordered,
// ephemeral consumer and deletes it before returning. Server.Shutdown may be
// called more than once and from any goroutine. Time for metrics comes from
// RelayOptions.Now.
package events
