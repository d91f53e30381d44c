// Command reconciler is the reconciler service and its operator tools.
//
// `reconciler serve` (the default command) runs the idempotency ledger: the
// claim and admin API, the vendor webhooks, the resolver and the outbox relay
// to NATS JetStream. With no flags it is a working single node: bbolt and an
// embedded NATS server in ./data, HTTP on 127.0.0.1:8080, and development
// tokens in ./data/token and ./data/admin_token (config.EnsureTokens).
//
// This package owns the program: Main (main_program.go), the wiring of the
// other packages into `serve` (serve.go; the event bus and its credentials
// in nats.go), and the subcommands drill, send-fixture, ledger (an admin CLI
// on client.Client), tools (a tenant's tool registry from a YAML file, on
// client.Client; tools_cmd.go), nats-creds (a NATS key pair for a tenant's runtimes
// or for the service on an external NATS, and an external server's accounts
// configuration; events.AccountLayout is the layout) and mcp-gate (flags
// and wiring of mcpgate.Gate over stdio, mcp_gate.go). Configuration —
// every setting of docs/architecture.md §9, precedence flag > RECONCILER_*
// environment > YAML file > default, validation, tokens, redaction — is the
// package internal/config. This is the only package that may import every
// other one, and the only one that knows which Store and which pager are in
// use.
//
// Traces (tracing.go) are off unless the OTEL_* variables ask for them;
// then one OpenTelemetry SDK TracerProvider, its exporter chosen by
// autoexport, is handed to the API, the relay, the resolver and the
// approval jobs, and flushed last on Close. The JSON log's handler adds
// trace_id and span_id to records logged inside a span.
//
// Concurrency: Main is driven by one goroutine (ParseFlags, Run, Close);
// HTTPAddr and Err may be called from any goroutine. Every goroutine Run
// starts is stopped by Close, in the shutdown order HTTP, resolver, relay,
// NATS, store, traces.
package main
