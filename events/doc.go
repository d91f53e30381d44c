// Package events moves resolution events from the ledger's outbox to NATS
// JetStream and lets agent runtimes wait for them.
//
//   - EnsureStream creates or updates stream RECON: subjects recon.>, file
//     storage, a 1 h duplicates window (never longer than MaxAge).
//   - Relay publishes outbox records in commit order on
//     recon.<tenant>.<run_id>.<status> with Nats-Msg-Id <tenant>:<key>:<status>, and
//     deletes a record only after its PubAck (a duplicate ack counts).
//   - Await returns the first resolution (succeeded, failed_poison,
//     escalated) of a key, from the stream and, with WithLedger, from a poll
//     of the ledger so a lost notification cannot strand a paused run.
//   - TenantPermissions is the one statement of what a tenant's runtime
//     credential may do on the bus (read its own events through a consumer
//     whose filter it cannot widen; publish nothing), ServicePermissions
//     the service's; InboxPrefix is the reply prefix a runtime must use.
//     permissions.go says which nats-server and nats.go code they were
//     checked against, and what permissions cannot close.
//   - Connect dials with the reconnect policy of the relay and Await;
//     Credentials (creds file, nkey seed file, CA, client certificate, in
//     the nats CLI's terms) add authentication and TLS.
//
// The embedded NATS server (the single-node default when no --nats-url is
// given) is events/natsserver, and the relay's Prometheus metrics are
// events/eventsprom: the relay reports to the RelayMetrics it is given
// (none by default). Both stay out of this package so that a runtime that
// only awaits events, like the client SDK, links neither nats-server nor
// Prometheus.
//
// Imports: ledger (domain types), nats.go/jetstream and cenkalti/backoff.
// Never the stores, nats-server, Prometheus or other adapters; cmd/reconciler
// wires a store's Outbox and the metrics into NewRelay.
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
// PublishAsync was measured (events/natsserver/doc.go) and is not used: it
// buys nothing with SyncAlways, and a timed-out message ahead of acked ones
// would put events on the stream out of order.
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
// # Durability
//
// The relay deletes an outbox record as soon as its PubAck arrives, so an
// acknowledged event must survive a power loss on the server's side:
// natsserver.DefaultOptions fsyncs every JetStream write before the ack
// (events/natsserver/doc.go has why and the measured cost, from
// BenchmarkPublishAck and BenchmarkRelay here). An external NATS
// (--nats-url) is the operator's to configure the same way.
//
// # Concurrency
//
// Relay.Run owns its loop and returns when its context is done, after the
// publish in flight (bounded by PublishTimeout) and the delete of the records
// already acknowledged; one Run at a time. Healthy is safe to call from any
// goroutine. Await is safe to call concurrently; each call owns one ordered,
// ephemeral consumer and deletes it before returning. Time for metrics comes
// from RelayOptions.Now.
package events
