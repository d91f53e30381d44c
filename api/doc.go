// Package api serves reconciler's claim API and admin API over HTTP (echo v4):
// claims and their long-poll, outcome reports, row reads and listing,
// compensations, resolution by hand, the tool registry (tools.go), the
// approval gate (approvals.go) and the outbox worker's start (work.go),
// health, readiness, metrics and the OpenAPI document (openapi.yaml,
// embedded and served at GET /openapi.yaml).
//
// Every request to /v1 carries `Authorization: Bearer <token>`. A token maps
// to one tenant, is one tenant's approver token (it reads and decides that
// tenant's approvals, nothing else), or is an admin token; the tenant always
// comes from the token, never from a body, and another tenant's key answers
// 404. Admin tokens have no tenant of their own: the admin routes (resolve,
// and the reads when given ?tenant=) name the tenant explicitly. An approval
// records the fingerprint of the token that made its claim and of the one
// that decided it, never a token.
//
// A claim's gate — its effective autonomy under the registry, the tool's
// checklist and class and its CEL policy — is decided here, from the
// Registry, and handed to the ledger with the claim, as the kill switch's
// Frozen is; the ledger decides what it means for the row. Every error leaves through one
// echo HTTPErrorHandler (errors.go) as {"error":{"code","message"}}
// (apierror.Body); a 500 never carries the internal error's text, which is
// logged instead. Any ledger error matching ledger.ErrInvalid is 400
// invalid_input with the ledger's InvalidError text.
//
// With Options.TracerProvider every request is a server span (tracing.go:
// otelhttp around Handler, W3C traceparent honoured on /v1 routes only),
// named claim, outcome, resolve or approval for those routes, with the
// row's attributes (internal/tracing); a claim stores its span's context
// on the row it inserts. Without one, Handler is the echo alone (dispatch.go).
//
// Imports: ledger (domain types, rules and sentinel errors), apierror,
// internal/tracing, echo, prometheus client_golang, otelhttp and the
// OpenTelemetry API, and the standard library. Which Store backs the
// API is decided by cmd/reconciler; this package declares the Store subset
// it consumes (Store, server.go).
//
// Every request has deadlines on its connection (deadline.go): its body
// must arrive within BodyTimeout of its headers, and its answer be written
// within AnswerTimeout after that; a long-polling claim has its wait added.
// They apply to every route on the Server's echo, the webhooks' included.
//
// The write routes take an Idempotency-Key header (idempotency.go): the
// value is checked, the request fingerprinted and handed to the store's
// flow in the request context (ledger.WithIdempotency), which answers a
// resend from the key's record; a second send while the first is answered
// here is 409 idempotency_key_in_flight. The value is never logged.
//
// Concurrency: a Server is safe for concurrent use by any number of
// requests. It starts no goroutines of its own: a long-polling claim
// (?wait=) waits inside its own request goroutine and ends with the wait,
// the request context, or a change to its row, whichever comes first.
package api
