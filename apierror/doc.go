// Package apierror is the error answer of reconciler's HTTP server, written
// by the API (package api) and the webhook handlers (package webhooks) and
// read by the Go client (and the CLI through it): the body
// {"error": {"code": "…", "message": "…"}} of docs/architecture.md §5, and the
// codes a client branches on. Defining it once keeps the writers and the
// readers in step.
//
// It imports only the standard library (make lint checks this), so the
// client takes none of the server's dependencies with it.
//
// Concurrency: the types are plain values.
package apierror
