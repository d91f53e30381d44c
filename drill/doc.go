// Package drill runs the duplicate-delivery drills a payments team runs
// before it lets an agent write on its own (docs/architecture.md §10, issue 6):
// each drill breaks one thing the way production breaks it and counts the
// side effects the vendor really made.
//
// Every drill gets a world of its own, in a fresh temporary directory: the
// bbolt ledger, an embedded NATS server with JetStream on a random loopback
// port (never 4222) in the account layout, whose one tenant user is the
// drill tenant's runtime (an nkey seed file in the tenant's own account, as
// a runtime on another host connects with client.ConnectNATS), the outbox relay, the real API (api.New) with the
// Stripe webhook handler on one loopback httptest server, and Vendor, a
// Stripe-like fake that really commits objects, remembers each answer by
// Idempotency-Key (a repeated key gets the stored answer with
// Idempotent-Replayed and creates nothing), serves Search by metadata for
// the resolver, signs its own webhooks from fixtures/, and injects faults
// per POST: commit then hang past the client's timeout, commit then hold
// until released, commit then 500, commit then 409 "already exists" naming
// the object, 400/402 refusals, a dropped connection, and a hook between
// its commit and its answer (the webhook that beats the runtime's report).
// A shared injected clock skips leases and replay windows without waiting.
//
// The agent side is a runtime (Options.Runtime): the Go SDK in-process
// (client.Do, client.Transport, stripe-go through client.StripeBackend,
// waits on NATS with the tenant's nkey), or the Python or TypeScript client
// in a runner process (long polls only). The drills drive the runtime's
// agents through a few operations — do (the SDK's Do), claim, call (the
// vendor call alone), report, compensate, get, scrub — with every vendor
// call described as data (method, URL, form, where the key and the local
// id go, where the answer names its object, a timeout), and read the
// answers back as the Go SDK's types and errors, so one set of checks
// judges every runtime. Each agent talks to the API through a loopback
// reverse proxy (the watch) under /agents/<name>, which sees every claim
// answer: that is how a drill knows that a second agent was told to wait,
// whatever language it is written in. What a drill asserts about rows it
// reads with a client of its own, straight from the API.
//
// The runner protocol, version 1 (ProtocolVersion). A runner is a program
// (clients/python/drill_runner.py, clients/typescript/scripts/drill-runner.mjs)
// started once per drill with RECONCILER_DRILL_URL (agent a's API base URL
// is that + "/a"), RECONCILER_DRILL_TOKEN and the client settings
// RECONCILER_DRILL_POLL_MS, _WAIT_MS, _RETRIES and _BACKOFF_MS in its
// environment. It writes only protocol lines, one JSON object each, to
// stdout; its stderr is logged. Its first line is its greeting:
//
//	{"protocol":1,"runtime":"python","client":"reconciler_client 0.1.0"}
//
// A runner that implements protocol steps beyond the base (below) lists
// them in its greeting; absent, it has none:
//
//	{"protocol":1,"runtime":"python","client":"…","capabilities":["await_approval","queued"]}
//
// A drill that needs a step the runner does not announce is skipped —
// reported as SKIP with the missing step named, neither failed nor
// passed — so a runner gains drills by implementing and announcing steps,
// and never fails one it was not built for. The Go runtime has them all,
// and so do both runners, each driving its client's own do() for them (no
// step of theirs goes around the client): every runtime runs every drill.
//
// Then it reads one op a line from stdin and answers each with one line,
// running ops at once (answers may come in any order, matched by id):
//
//	{"id":3,"op":"do","agent":"a","claim":{…the API's claim body…},"call":{"url":"http://127.0.0.1:…/v1/payment_intents",
//	  "method":"POST","form":{"amount":"1050",…},"key_header":"Idempotency-Key",
//	  "local_id_field":"metadata[metadata_local_id]","receipt":["id","error.resource_id"],"timeout_ms":10000}}
//	{"id":3,"outcome":{"decision":"proceed","key":"…","local_id":"rl_…","row":{…the API's row…},"called":true,
//	  "result":{"http_status":200,"receipt_id":"pi_…","headers":{…}},"kind":"response","replayed":false,"waited":false}}
//
// The ops and what their answers carry: do (claim, call) → outcome;
// claim (claim) → claim {decision, code, row, http_status}; call (call,
// key, local_id) → result; report (key, outcome: the API's report body) →
// row; compensate (key, action) → claim; get (key) → row; scrub (args) →
// args. A call's answer of any status is a result; only no answer is an
// error. A failed op answers error {class, code, status, key, row_status,
// message}, do with its outcome beside it, as the SDKs return it; the
// classes: stopped (code failed_poison or tool_frozen), unsettled
// (row_status), escalated, report_failed, unknown_decision, api (status and
// code of the API's answer, message the API's), transport (no answer),
// protocol (an answer not the API's), unsupported (an op the runner does
// not know) and error (anything else).
//
// The steps a runner announces (ProtocolVersion stays 1: a runner that
// announces none is a version-1 runner as before):
//
//   - "await_approval": do faces the decision await_approval (202: the
//     tool's gate asks a human) as the Go SDK's Do does: it calls nothing,
//     waits — by long-polling the same claim with ?wait=, which answers
//     wait (409) while the approval is requested — until a claim answers
//     anything else, then acts on that answer: proceed (the one call the
//     grant allows, with the same key and local id, reported as any call)
//     or stop, answered as error class stopped with code approval_denied
//     or approval_expired. Its outcome then carries "awaited_approval":
//     true. A do whose time runs out while the approval is still requested
//     answers error class awaiting_approval (key set): nothing was called
//     (the Python and TypeScript clients end that wait with their plain
//     unsettled error, its outcome awaited_approval and not called, which
//     their runners answer as this class).
//     The drills irreversible-waits-for-approval, denied-never-calls and
//     open-checklist-stays-gated need it; the harness approves or denies
//     with an approver token of its own, after the watch saw the agent
//     told await_approval.
//   - "queued": do faces the decision queued (202: an outbox tool; the
//     runtime's worker makes the call) by calling nothing and answering
//     error class queued with the key (its outcome: decision queued, the
//     row). An op do with "wait_queued": true instead waits until the
//     row is closed — asking every poll interval (an agent's claim of an
//     open queued row answers queued at once, so it cannot long-poll: the
//     Go SDK reads GET /v1/claims/{key} and then claims, the Python and
//     TypeScript clients claim until the answer is not queued) — and
//     answers as for the claim that ended it: replay (outcome "queued":
//     true, "called": false, the worker's receipt) or stopped. A row a human was paged for ends the
//     wait as escalated. The drill outbox-three-retries-execute-once needs
//     it; its worker is the Go SDK's client.Worker, run by the harness with
//     the tenant's NATS credential (the other clients have no JetStream
//     consumer), so the runner implements no worker op.
//
// At the end of stdin the runner
// exits; an op still in flight is abandoned. A new kind of step (an
// approval, an outbox worker's pull) is a new op; a new claim decision
// needs none, decisions travel as strings.
//
// The drills (Names): slow success + client timeout; double harness resume
// after a crash mid-pending; the model re-emitting the call with new
// ephemeral ids; 409 with a receipt; a 500 followed by a signed webhook; a
// business key reused for another amount (422); compensation refused while
// pending and made once; a webhook before the runtime's own report; and a
// row whose replay window closed, paged exactly once over several resolver
// passes (fake PagerDuty) with one escalated event on NATS; a
// write_irreversible call that waits for approval and calls the vendor
// once after the grant; a denied approval that stops with approval_denied
// and never calls; a tool registered autonomous with a checklist box open
// that stays gated; and three concurrent agent retries of an outbox tool
// that the worker executes once.
//
// Each drill's world has the tool registry (registry.Cache over the
// bolt store) and an approver token; the harness registers the drills'
// charge tool (Stripe, write_idempotent, Idempotency-Key, autonomous,
// every box checked), and each approval or outbox drill registers its
// variant. Options.Tool (`reconciler drill --tool NAME`) registers a
// tenant's own entry instead, as registered but with its
// duplicate_delivery_test box checked (the box the drills decide): the
// drills built on the fake Stripe run for a Stripe write_idempotent tool
// keyed in Idempotency-Key that claims autonomously, the approval drills
// for a tool gated by approval, the outbox drill for an outbox tool, the
// open-checklist drill for every write tool; the others are skipped.
//
// A drill that cannot fail proves nothing, so each has a sabotage
// (Options.Sabotage, for tests only): an unsafe runtime that mints a fresh
// key per retry, ignores wait, skips scrub or the claim, reads a 409 or a
// 500 as "did not happen", refunds without the compensation claim, omits
// metadata_local_id, a resolver that does not see paged_at, a runtime
// that calls while the approval is requested, calls anew after a denial
// or takes queued for "not done" and calls, or a registry that ignores an
// open checklist box. The
// sabotages live in the harness, made of the runtime's own operations, so
// they work with every runtime. TestDrillsCatchSabotage runs each drill
// with its sabotage, with each runtime that can run here, and requires a
// FAIL — for the autonomy drills a FAIL on the sabotage's own symptom, the
// vendor called — and no SKIP; TestDrills requires every drill to pass
// with each runtime, none skipped.
//
// Imports: api, client, events, events/natsserver, fixtures, ledger,
// ledger/bolt, paging, registry, resolver and webhooks of this module (it wires them
// the way cmd/reconciler does), stripe-go and nats.go. Only cmd/reconciler
// and tests import drill. It runs python3 or node for those runtimes.
//
// Concurrency: Run runs the drills one after another; each drill's
// goroutines (the relay, runtime calls it starts, the test servers'
// handlers, a runner's stdout and stderr readers) and its runner process
// are owned by that drill and end before its Result is returned, when its
// environment is closed: the runtime first (its stdin closed, killed if it
// does not exit), then in the service's shutdown order. Vendor and
// PagerDuty are safe for concurrent use.
package drill
