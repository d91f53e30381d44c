// Package console is the ops console: server-rendered pages at /console for
// the person the service pages (docs/architecture.md §16).
//
// What it shows it reads from the ledger's store (rows, approvals, the tool
// registry, the kill switch) and from the RECON stream (a row's history:
// every event the relay published for its run); what it does it does
// through the service's own HTTP API, in process, with the signed-in
// person's token in the Authorization header — the same routes, checks,
// logs, metrics and spans as `reconciler ledger resolve` or curl, so there
// is one audit trail and one authorisation.
//
// Sessions: a person signs in with an admin or approver token and the name
// recorded as the actor of each action; the session (a random id, the
// token, the name, the CSRF token, the expiry) is sealed with AES-256-GCM
// under a key derived from Options.SessionKey into an HttpOnly,
// SameSite=Strict cookie (Secure behind TLS), never written to a page, URL
// or log. Every replica given the same key opens it, so a load balancer
// needs no stickiness; sign-out records the session's id in the store
// (Options.Revocations), which every replica reads. Without a key each
// process makes one: sessions are then that replica's. Every form carries
// the session's CSRF token; every answer carries a strict
// Content-Security-Policy (scripts and styles from /console/static only, no
// inline script) and every page Cache-Control: no-store. An approver sees
// and decides only its own tenant.
//
// The row page's timeline joins the row, the run's events on the stream
// and the row's journal in the store (Options.Journal): deliveries that
// changed nothing, the resolver's findings, why it was paged. Search by
// local, receipt or tool call id is the store's complete FindRows
// (Options.Finder), within Options.SearchTimeout.
//
// The pages work without JavaScript; console.js adds the live feed, a
// Server-Sent Events stream (/console/events) fed by a core NATS
// subscription to the resolution events.
//
// Imports: ledger, and nats.go for the stream and the live feed. Safe for
// concurrent use; Close ends the live streams (register it before the HTTP
// server's shutdown waits for them).
package console
