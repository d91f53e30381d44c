// Package webhooks receives vendor webhooks over HTTP (echo): it reads the
// raw body once under a size cap, verifies the vendor's signature and
// timestamp, decodes the few fields the ledger needs into a normalised
// Event, builds the ledger.Delivery with matcher.Match and hands it to the
// store's Ingest, which commits the inbox record, the transition and the
// outbox record in one transaction. Only then does the sender get its 2xx.
//
// Schemes: Stripe (stripe.go: Stripe-Signature, any API version), Standard
// Webhooks senders such as Resend (standard.go), and PayPal (paypal*.go:
// certificate or postback verification). Every other vendor is a preset:
// a data file in presets/ (embedded) that one declarative verifier runs
// (spec.go, template.go, verify.go; twilio.go and adyen.go for the two
// schemes a template cannot express), served at
// /webhooks/<preset>/<name> (preset_endpoint.go). A batch is verified
// whole and stored an element at a time. handler.go holds the plumbing
// they share: routing by endpoint name, answers, metrics and logs.
//
// A scheme whose signature does not cover the event (Mailgun: timestamp
// and token only) records its token with the event (Delivery.ReplayToken:
// a replay onto another event is refused at every replica) and, for a
// vendor the resolver can ask (Options.Refetch), is a hint: recorded and
// joined, no outcome applied, the row due now (Delivery.Recheck), the
// resolver woken (Options.Recheck).
//
// Answers: 200 once stored (a duplicate too); 400 with nothing stored for a
// bad signature, a stale or future timestamp, an unparsable body or a
// delivery the ledger refuses; 413 past the body limit; 404 for an unknown
// endpoint; 503 only when the store (or PayPal's certificate host) cannot
// answer, so the vendor retries. Errors use the API's shape
// {"error": {"code", "message"}} (apierror.Body).
//
// A delivery's server span (the API's, when it traces) is named webhook
// and carries the endpoint, the event's id and type, the result and the
// row, linked to the row's claim (tracing.go); never a body, a signature
// or a secret.
//
// Imports: ledger, matcher, apierror and internal/tracing of this module;
// echo, yaml.v3 (the presets), the Prometheus client and the OpenTelemetry
// API. Never api, a store, or another adapter.
//
// Concurrency: a Handler is immutable after New and safe for concurrent
// use (a replay cache guards itself with a mutex); it starts no goroutines. Secrets, signatures and bodies are never
// logged.
package webhooks
