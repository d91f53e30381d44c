// Package drill runs the duplicate-delivery drills a payments team runs
// before it lets an agent write on its own (docs/architecture.md §10, issue 6):
// each drill breaks one thing the way production breaks it and counts the
// side effects the vendor really made.
//
// Every drill gets a world of its own, in a fresh temporary directory: the
// bbolt ledger, an embedded NATS server with JetStream on a random loopback
// port (never 4222) whose one user is the drill tenant's runtime (an nkey
// seed file and events.TenantPermissions, as a runtime on another host
// connects with client.ConnectNATS), the outbox relay, the real API (api.New) with the
// Stripe webhook handler on one loopback httptest server, and Vendor, a
// Stripe-like fake that really commits objects, remembers each answer by
// Idempotency-Key (a repeated key gets the stored answer with
// Idempotent-Replayed and creates nothing), serves Search by metadata for
// the resolver, signs its own webhooks from fixtures/, and injects faults
// per POST: commit then hang past the client's timeout, commit then hold
// until released, commit then 500, commit then 409 "already exists" naming
// the object, 400/402 refusals, and a dropped connection. The agent side
// runs through client.Do, client.Transport and client.StripeBackend exactly
// as an agent runtime would. A shared injected clock skips leases and replay
// windows without waiting.
//
// The drills (Names): slow success + client timeout; double harness resume
// after a crash mid-pending; the model re-emitting the call with new
// ephemeral ids; 409 with a receipt; a 500 followed by a signed webhook; a
// business key reused for another amount (422); compensation refused while
// pending and made once; a webhook before the runtime's own report; and a
// row whose replay window closed, paged exactly once over several resolver
// passes (fake PagerDuty) with one escalated event on NATS.
//
// A drill that cannot fail proves nothing, so each has a sabotage
// (Options.Sabotage, for tests only): an unsafe runtime that mints a fresh
// key per retry, ignores wait, skips Scrub or the claim, reads a 409 or a
// 500 as "did not happen", refunds without the compensation claim, omits
// metadata_local_id, or a resolver that does not see paged_at.
// TestDrillsCatchSabotage runs each drill with its sabotage and requires a
// FAIL; TestDrills requires every drill to pass.
//
// Imports: api, client, events, events/natsserver, fixtures, ledger,
// ledger/bolt, paging, resolver and webhooks of this module (it wires them
// the way cmd/reconciler does), stripe-go and nats.go. Only cmd/reconciler
// and tests import drill.
//
// Concurrency: Run runs the drills one after another; each drill's
// goroutines (the relay, runtime calls it starts, the test servers'
// handlers) are owned by that drill and end before its Result is returned,
// when its environment is closed in the service's shutdown order. Vendor
// and PagerDuty are safe for concurrent use.
package drill
