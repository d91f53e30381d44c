// Command httpload is the HTTP load program behind `make bench-http`
// (scripts/bench-http.sh): in one process it starts two targets on loopback
// and drives each with the same number of keep-alive HTTP/1.1 connections
// for the same time, then compares them.
//
//	go run ./cmd/httpload [-mode claim|webhook] [-duration 10s] [-conns 64] [-rounds 1] [-json] [-cpuprofile cpu.out]
//
// It exits 1 when a target cannot start, any request failed, or an event is
// missing after the drain; 2 on bad flags. main.go reads the flags into a
// Config; Run does the rest.
//
//   - bare: an echo v4 server whose POST /v1/claims reads the body and
//     answers 201 with a small JSON body, touching no store. It is the
//     ceiling that HTTP, echo and the load generator itself allow.
//   - real: api.New over a fresh ledger/bolt store (fsync on, group commit)
//     in a temporary directory, one tenant token, an embedded NATS server
//     (natsserver.DefaultOptions: JetStream fsyncs every second) on a
//     random port, the RECON stream and an events.Relay on the store's
//     outbox, holding each record natsserver.SyncedAfter past its PubAck:
//     the durable path a claim takes in `reconciler serve`.
//     With -store postgres://… (Config.Store) the store is ledger/postgres
//     in a database the run creates on that server (httpload_<random>)
//     and drops after it, with the store's default pool; the report then
//     names the store and issue 31's targets (real/pgx >= 0.8,
//     durable/verify-only >= 0.3).
//
// Phase 1 sends unique claims (every one inserts a row) to bare, then to
// real, and reports claims/s, p50, p99 and errors for each and the ratio
// real/bare. With Config.Rounds > 1 the measured time is split into
// alternating bare/real rounds, so that on a shared machine both targets
// see the same background load. Each phase also reports the CPU the process
// used, the time its threads waited for a CPU (Linux), and CPU time per op:
// the last hardly depends on other processes, unlike ops/s. The report
// carries the bolt committer's group size, commit time and busy share
// during real's phase 1, which tell a disk-bound run from a CPU-bound one. Phase 2 sends claim + outcome (kind timeout) pairs to real:
// each pair moves a row pending → unknown and writes one outbox record that
// the relay publishes. An ordered JetStream consumer timestamps each stored
// event; the relay lag of a key is the time from its outcome's 2xx to that
// arrival. After the load stops, every event must arrive within the drain
// timeout, or Run fails and names how many are missing.
//
// Webhook mode (Config.Mode = ModeWebhook, webhook.go) measures durable
// Stripe ingest instead. The real target then also carries the webhook
// routes as serve wires them (webhooks.New over the store, one Stripe
// endpoint for the tenant) plus the verify-only route, which serve never
// has: a second webhooks.New over the same endpoint whose Ingester stores
// nothing (noIngest), mounted under /webhooks/stripe-verify-only, so a
// delivery runs the whole handler, store call included, and only the
// store's work is missing. Before the load, Config.WebhookRows rows are
// claimed and reported timeout (unknown) straight through the store from
// 256 goroutines, their setup events are cleared from the outbox, and only
// then does the relay start. Both targets send
// fixtures' stripe/2024-06-20/payment_intent.succeeded with a fresh event
// id and object id, and a row's metadata_local_id and key, signed by the
// client before each request's timer starts: verify-only rounds alternate
// with durable rounds, on separate clients. Each durable delivery takes
// the next unused row and must answer 200 "accepted"; after the load every
// acknowledged row is read back and must be succeeded with its delivery's
// object id as receipt, or Run fails. There is no phase 2 in webhook mode;
// its events are measured instead (events.go). An observer like phase 2's
// times every durable delivery's 200 against its event's arrival from the
// stream; after the durable rounds (the peak), Config.HalfDuration of
// durable deliveries at half the peak's rate follows. Each phase reports,
// over its measured window, the deliveries answered per second (ingest),
// the events that arrived per second (relay), their ratio, and the lag
// percentiles of its deliveries, against the targets: relay/ingest at
// least 0.99 (the relay keeps up) and lag p99 under 1 s at peak, under
// 100 ms at half. After the load every event must arrive and the outbox
// empty (held records are deleted SyncedAfter later) within
// Config.DrainTimeout, or Run fails with ErrEventsMissing.
//
// Latencies are kept per worker in plain slices and sorted once at the end
// (exact percentiles; a 10 s run at a few thousand requests a second is a few
// hundred kilobytes). The load generator shares the CPU with the servers it
// measures, which is the point of a same-process comparison: both targets
// pay the same client cost.
//
// Imports: api, events, events/natsserver, ledger, ledger/bolt, webhooks
// (and through it matcher), fixtures, echo, nats.go (jetstream),
// golang.org/x/time/rate and the standard library. It is a bench tool: no
// product package imports anything of it.
//
// Concurrency: Run owns every goroutine it starts (HTTP servers, the relay,
// the event observer, the load workers, webhook mode's setup claimers) and stops them all before it
// returns, whether it succeeds, fails or ctx ends. Requests stop being sent
// at the end of each phase's duration; a request in flight then is bounded
// by Config.RequestTimeout. Time comes from Config.Now.
package main
