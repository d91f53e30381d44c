// Package client is the Go SDK for agent runtimes: it puts every write tool
// call under the reconciler ledger, so a timeout retried by the model loop,
// the harness and the HTTP client is still one side effect.
//
//   - New, Claim, ReportOutcome, Get, List, Compensate and Resolve mirror the
//     claim API (docs/architecture.md §5); every API error is an *Error that
//     matches a sentinel with errors.Is (ErrNotFound, ErrFingerprintMismatch,
//     ErrUnavailable, …). With an admin token, WithTenant names the tenant
//     read; GetJSON, ListJSON and ResolveJSON hand back rows as the server
//     sent them, every field included (`reconciler ledger --json`).
//   - Do claims the intent's key, calls the vendor only on proceed or
//     retry_same_key, classifies and reports the answer (resending a lost
//     report with the same body), replays a stored receipt, waits for a key in
//     flight elsewhere (NATS via events.Await, or long polls), and returns a
//     *StopError or *UnsettledError when the side effect did not (or may not
//     have) happened. It never calls the vendor under a new key: a crash
//     between the call and the report leaves the row pending for its lease,
//     then a retry of the same intent gets the same key (or the resolver
//     settles the row from vendor truth).
//   - Write autonomy (docs/architecture.md §11): on await_approval Do waits
//     for the human's decision as for a wait (NATS wakes it on approved,
//     denied, approval_expired), then makes the one call a grant allows or
//     returns the *StopError (approval_denied, approval_expired); a ctx
//     that ends first returns an *AwaitingApprovalError (ErrAwaitingApproval),
//     the row still waiting. On queued (an outbox tool) Do calls nothing
//     and returns a *QueuedError (ErrQueued: key, run, row) for the
//     runtime to park on — a typed error, not an Outcome with a nil error,
//     because a nil error means the side effect happened — or, on a client
//     WithWaitQueued, waits for the worker's result and returns it as a
//     replay. Both errors match ErrUnsettled too, as the Python and
//     TypeScript clients' QueuedError is an Unsettled and their approval
//     wait ends in one: the row is open, so a runtime that parks on "not
//     known yet" parks on them as well. Worker is the outbox worker: it takes the tenant's work items
//     from RECON_WORK through one durable consumer shared by every worker
//     process (made again if it disappears), Starts each key (proceed once
//     across workers), calls the tool's WorkHandler with Do's attempt, and
//     acks — or hands the item back while the row's lease lives or the row
//     is still pending (a 429: retried later with the same key); a
//     handler's panic leaves the row unknown and the Worker running. Start, StartWait,
//     ListApprovals, GetApproval, Approve and Deny are the routes beneath.
//   - ConnectNATS connects a runtime to the event bus for WithNATS, with
//     its tenant's credential (NATSCredentials: the seed file
//     `reconciler nats-creds --tenant T` writes, or a creds file, and a CA)
//     and the tenant's inbox prefix, which the credential's permissions
//     require.
//   - Scrub and ScrubSchema keep a model from choosing a write's identity:
//     they remove idempotency_key, request_id, message_id-style fields from
//     tool arguments and from the tool schema the model sees.
//   - StripeBackend (a stripe.Backend) and StripeParams make stripe-go writes
//     carry the ledger key explicitly and metadata[metadata_local_id];
//     StripeResult reads the answer. Transport does the same for any vendor
//     over plain HTTP (Idempotency-Key, PayPal-Request-Id, or a body field).
//   - Traces: Do annotates the runtime's tool span (or starts an
//     execute_tool span from the global TracerProvider) with the row's
//     attributes, and every request carries its W3C traceparent
//     (tracing.go); events.ResumeContext continues the trace after Await.
//
// Imports: ledger (types and sentinels only), apierror (the error body and
// its codes), events (Await, Connect, Credentials) and internal/tracing;
// from outside, nats.go, stripe-go and the OpenTelemetry API. Never a
// store, the api, events/natsserver or any other adapter, and not even
// transitively nats-server, Prometheus, echo, pgx, bbolt, or the
// OpenTelemetry SDK, exporters, contrib or gRPC: a runtime that links the
// SDK gets none of the service's dependencies (make lint checks).
//
// Concurrency: a Client is safe for concurrent use; Do runs the vendor call
// on the caller's goroutine and starts no goroutine of its own (events.Await
// owns and stops its consumer before returning). A Worker's goroutines
// (its pullers, one per concurrency slot, and a progress ticker per start
// and per call) are owned by Run, which returns once they have ended.
// Transport and StripeBackend are safe for concurrent use; Scrubber is
// read-only after NewScrubber.
package client
