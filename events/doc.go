// Package events moves resolution events from the ledger's outbox to NATS
// JetStream and lets agent runtimes wait for them.
//
//   - EnsureStream creates or updates stream RECON: subjects recon.>, file
//     storage, a 1 h duplicates window (never longer than MaxAge).
//   - Relay publishes outbox records on recon.<tenant>.<run_id>.<status>
//     with Nats-Msg-Id <tenant>:<key>:<status>, up to RelayOptions.Window at
//     a time, each row's records in commit order, and deletes a record only
//     after its PubAck (a duplicate ack counts) and, with
//     RelayOptions.SyncedAfter, only once the server has certainly synced it.
//   - EnsureWorkStream creates or updates stream RECON_WORK for the
//     outbox autonomy's work items: subjects recon_work.> (the design's
//     recon.work.> would overlap RECON's recon.>, which JetStream
//     refuses), work-queue retention, file storage, the same duplicates
//     window. The relay publishes a work item (an outbox record of status
//     queued) there on recon_work.<tenant>.<tool> — a dotted tool makes
//     several tokens, so a worker subscribes to recon_work.<tenant>.> —
//     with Nats-Msg-Id <tenant>:<key>, one per key. Relay.route is the one
//     place an outbox record is mapped to its stream, subject and msg id.
//   - Await returns the first resolution (succeeded, failed_poison,
//     escalated, denied, approval_expired) of a key, from the stream and,
//     with WithLedger, from a poll of the ledger so a lost notification
//     cannot strand a paused run.
//   - AccountLayout is the account boundary of the bus: the streams in
//     ServiceAccount, each tenant's runtimes in TENANT_<tenant>, which
//     imports only its events (live) and its work consumer (under
//     TenantAPIPrefix); ServerConfig renders it for the embedded server
//     and for `reconciler nats-creds --server-config`. TenantPermissions
//     bound a tenant's users inside their account, ServicePermissions the
//     service's; InboxPrefix is the reply prefix a runtime must use;
//     TenantJetStream picks a runtime's JetStream context.
//     EnsureWorkConsumers and KeepWorkConsumers make every tenant's work
//     consumer, which a tenant cannot.
//   - StreamConfig.Limits and WorkStreamConfig bound the streams
//     (max bytes, max message size, discard); a stream that refuses an
//     event for its limits is ErrStreamFull to the relay, an outage the
//     outbox rides out; ReadStreamUsage says how full each is.
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
// Traces: with RelayOptions.TracerProvider each message sent is a publish
// span (a producer span, child of the row's claim, messaging.system nats)
// started in Relay.publish and ended in Relay.settle, whose context the
// message's traceparent header carries; without one the header carries
// the row's stored traceparent. Await puts the header's traceparent in the
// event it returns and ResumeContext continues it (tracing.go).
//
// Imports: ledger (domain types), internal/tracing, nats.go/jetstream,
// cenkalti/backoff and the OpenTelemetry API (never its SDK: the client
// links this package).
// Never the stores, nats-server, Prometheus or other adapters; cmd/reconciler
// wires a store's Outbox and the metrics into NewRelay.
//
// # The pipeline
//
// The relay reads the outbox ahead of its publishes (EventsAfter past the
// last record it read, or ClaimEvents) and keeps up to Window publishes
// (PublishMsgAsync) waiting for their PubAck; a collector goroutine takes
// the PubAcks in publish order, which is the order one connection's
// publishes to one stream are answered in. Each message leaves through
// Relay.publish and its outcome arrives at Relay.settle, where its publish
// span starts and ends. Relay.message maps a record to its stream, subject,
// message id and traceparent header. The store's writes (HoldEvents, AckEvents) and CountEvents
// run in a keeper goroutine, one job at a time, so a commit that stalls on
// a busy disk delays a delete, never a publish; deletes are batched
// (every 100 ms, or at 1,000 due records). BenchmarkRelay measures the
// window against one publish at a time; events/natsserver/doc.go has the
// figures.
//
// # Ordering and delivery
//
// A record is not published while an earlier record of its row (tenant,
// key) has no PubAck, so each row's events reach the stream in commit
// order; records of different rows may reach it in any order. A publish
// that fails, or has no PubAck within PublishTimeout, goes back ahead of
// its row's later records and is published again after the backoff; one
// that cannot be sent (NATS unreachable: Connect keeps no reconnect
// buffer, which would send it after the reconnect, ahead of what the
// relay publishes again) stops the publishing until then. A record
// published twice (a lost PubAck, a restart) is dropped by JetStream's
// duplicates window and answers PubAck.Duplicate, so within the 1 h window
// every event is stored once. While NATS or the store is unavailable the
// records stay in the outbox, Healthy returns the error (for /readyz), and
// the relay retries after a jittered exponential backoff (100 ms doubling
// to 10 s); notifications do not cut the wait short. Backlog (and the
// reconciler_outbox_depth and reconciler_outbox_oldest_seconds gauges)
// shows how many records wait to be published and how long the oldest
// has waited; serve reports /readyz degraded past events.degraded_depth.
// A delete or hold that fails leaves the relay unsure of what the store
// kept: it forgets what it read and reads the outbox from the start, as
// after a restart.
//
// # Durability
//
// No acknowledged event is lost on a SIGKILL at any moment, nor, by the
// following argument, on a power loss. Each step names the test behind it.
//
//  1. A transition's outbox record commits with the transition, before the
//     caller's 2xx (ledger/storetest, ledger/bolt TestCrash).
//  2. JetStream writes a message to the kernel before it sends the PubAck
//     (natsserver TestAckedEventsSurviveSIGKILL) and fsyncs its writes
//     every sync interval while it runs: the embedded server's is
//     natsserver.DefaultSyncInterval, 1 s (natsserver TestDefaultOptionsSync
//     checks the setting; the periodic fsync itself is nats-server's
//     filestore, which no test here can watch).
//  3. The relay deletes a record only once SyncedAfter has passed since its
//     PubAck on the relay's clock (TestRelayHoldsUntilSynced), and only
//     after the server has answered a ping, sent after that time, on the
//     connection that carried the PubAck with no reconnect in between
//     (TestRelayKeepsHeldWhileServerDown). The server was up throughout a
//     sync round after the write, so the message is on its disk:
//     natsserver.SyncedAfter (3 s) is the 1 s interval plus a margin for
//     the rounds' own time. Until then the relay holds the record in
//     memory (a LeasingOutbox also marks it held) and does not publish it
//     again.
//  4. After a reconnect (perhaps a restarted server that lost what it had
//     not synced) the relay publishes its held records again
//     (TestRelayRepublishesHeldAfterReconnect); after a restart, the new
//     relay publishes every record left in the outbox. JetStream rebuilds
//     its duplicates window from the stream when it starts, so what the
//     stream kept is dropped and what it lost is stored:
//     TestRelaySurvivesSIGKILL kills the process mid-window, between the
//     PubAcks and the delete, and during a batch delete, and finds every
//     committed event on the stream once, each row's in commit order.
//  5. Order under failures (acks out of order, errors, timeouts):
//     TestRelayKeyOrder.
//
// So after a power loss of the single node, every record the store deleted
// is on the server's disk (3), every other committed event is still in the
// outbox (1), and the restart publishes it (4). The server may lose the
// messages of its last sync interval; their records are among those
// republished, in commit order per row. A record is held at most
// SyncedAfter plus a delete round, far inside the 1 h duplicates window
// (MaxSyncedAfter is 10 min); a restart more than an hour after a crash
// publishes the held records as second copies, which consumers tell apart
// by Nats-Msg-Id (Await takes the first).
//
// SyncedAfter 0 deletes a record at its PubAck: right for a server that
// syncs before it acks (sync_interval: always) or a stream of three or more
// replicas, whose PubAck means a quorum stored it. The relay cannot read
// an external server's sync policy: cmd/reconciler's events.synced_after
// says it (auto: natsserver.SyncedAfter embedded, 0 for an external stream
// of 3+ replicas, StockSyncedAfter, 2m30s, for any other external server,
// whose stock sync_interval is 2 min).
//
// # Many replicas
//
// When the Outbox given to NewRelay also implements LeasingOutbox
// (ledger/postgres does, with SELECT … FOR UPDATE SKIP LOCKED), the relay
// leases batches for RelayOptions.Lease (30 s) instead of reading
// EventsAfter, so the relays of N replicas share the outbox without a
// leader and a record is handed to one relay at a time. The store never
// hands out a row's record while an earlier record of that row is leased
// and not held, and the relay starts a publish only while PublishTimeout
// still fits in its lease, so every publish of a lease ends before anyone
// else can take the row's next record: each row's events stay in commit
// order across relays. With SyncedAfter the relay marks its acknowledged
// records held (HoldEvents) until SyncedAfter plus a lease: a held record
// is on the stream, so it keeps no later record of its row waiting, and
// no relay is handed it while the hold runs. Records a relay leaves
// otherwise (a crash, a lease running out, a hold ending before the
// delete) are handed out again; the second publish is a duplicate. One
// case keeps no order: if the server restarts having lost a held record,
// the relay publishes it again, and another relay may meanwhile have
// published a later record of its row. Relays' clocks (RelayOptions.Now)
// must agree to well within a lease.
//
// A record that can never be published (a tenant or run_id that is not a
// subject token) is dropped with an error log and counted as
// result="invalid": keeping it would block every later event of its row,
// and the row itself still holds the truth.
//
// # Concurrency
//
// Relay.Run owns its loop, the collector and the keeper goroutines, and
// returns when its context is done, after the publishes in flight (bounded
// by PublishTimeout) and a last round of deletes; held records not yet
// deletable stay in the outbox for the next start. One Run or Drain at a
// time. Healthy and Backlog are safe to call from any goroutine. Await is
// safe to call concurrently; each call owns one ordered, ephemeral consumer
// and deletes it before returning. Time for metrics, leases and
// SyncedAfter comes from RelayOptions.Now; backoff and PubAck timeouts use
// the wall clock.
package events
