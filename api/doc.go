// Package api serves reconciler's claim API and admin API over HTTP (echo v4):
// claims and their long-poll, outcome reports, row reads and listing,
// compensations, resolution by hand, health, readiness, metrics and the
// OpenAPI document (openapi.yaml, embedded and served at GET /openapi.yaml).
//
// Every request to /v1 carries `Authorization: Bearer <token>`. A token maps
// to one tenant or is an admin token; the tenant always comes from the token,
// never from a body, and another tenant's key answers 404. Admin tokens have
// no tenant of their own: the admin routes (resolve, and the reads when
// given ?tenant=) name the tenant explicitly. Every error leaves through one
// echo HTTPErrorHandler (errors.go) as {"error":{"code","message"}}
// (apierror.Body); a 500 never carries the internal error's text, which is
// logged instead. Any ledger error matching ledger.ErrInvalid is 400
// invalid_input with the ledger's InvalidError text.
//
// Imports: ledger (domain types, rules and sentinel errors), apierror, echo,
// prometheus client_golang, and the standard library. Which Store backs the
// API is decided by cmd/reconciler; this package declares the Store subset
// it consumes (Store, server.go).
//
// Every request has deadlines on its connection (deadline.go): its body
// must arrive within BodyTimeout of its headers, and its answer be written
// within AnswerTimeout after that; a long-polling claim has its wait added.
// They apply to every route on the Server's echo, the webhooks' included.
//
// Concurrency: a Server is safe for concurrent use by any number of
// requests. It starts no goroutines of its own: a long-polling claim
// (?wait=) waits inside its own request goroutine and ends with the wait,
// the request context, or a change to its row, whichever comes first.
package api
