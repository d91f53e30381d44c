// Package mcpgate is the MCP gate (docs/architecture.md §14): an MCP
// server, built on the official Go SDK (github.com/modelcontextprotocol/go-sdk),
// that fronts one upstream MCP server and puts its write tools under the
// reconciler ledger, so a tool call that a model, a harness and a transport
// each retry is still one side effect. `reconciler mcp-gate` runs it over
// stdio.
//
// What the gate lists: the upstream's tools, refreshed on every tools/list
// and on the upstream's list_changed notification. A tool the registry
// (§11) knows as class read is listed as the upstream lists it; every other
// tool has its key-like properties (client.DefaultScrubFields, and the
// registry's key_placement.argument) removed from its input schema, so the
// model never chooses a key.
//
// What a tools/call does, after the gate reads the tool's registry entry
// (GET /v1/tools/{name}, every call, so a registration holds at once):
//
//   - a registered read goes upstream untouched;
//   - an unregistered tool goes upstream unclaimed with key-like arguments
//     removed, as §11 serves an unregistered tool "as before" — or, with
//     Options.Strict, is refused;
//   - a registered write is claimed: the intent is the registry's
//     intent_fields of the arguments, or every argument but key-like ones;
//     run_id is _meta["reconciler/run_id"], else Options.RunID (one per gate
//     session). On proceed or retry_same_key the call goes upstream with the
//     row's vendor_key (the key the vendor's profile asks for; the ledger
//     key unless it must be shorter or shaped) in the argument
//     key_placement names (a tool placed {none: true} gets no key; a
//     header or body placement is refused: it cannot travel over MCP), and
//     _meta reconciler/idempotency_key, reconciler/vendor_key and
//     reconciler/metadata_local_id. Its answer is reported: a result as a
//     200 (succeeded), a result marked isError or a malformed-call error as
//     a 4xx (failed_poison), another protocol error as a 502, no answer
//     within Options.CallTimeout or a lost connection as a timeout or
//     network error (unknown). The result, up to ledger.MaxResultLen bytes
//     of its JSON, is stored with the outcome, and the client gets that
//     very text decoded, so a replay of the intent returns the same result
//     without calling upstream. wait, stop, await_approval and queued come
//     back as results that say so; an unknown decision is an error result.
//
// The ledger failing — unreachable, a 5xx, an answer that is not the API's
// JSON — is an error result (never a silent success), and before the
// upstream call it means no upstream call. After it (the report lost), the
// result says the call was made but not recorded: the row stays pending
// for the resolver. Results of the gate's own carry reconciler/decision,
// /code, /status, /idempotency_key and /error in _meta. A call's _meta goes
// upstream without the per-hop keys (io.modelcontextprotocol/*, which each
// connection sets for itself, and progressToken: progress is not relayed)
// and, for a write, without the client's reconciler/* keys; a stored result
// drops the upstream connection's per-hop keys too. Prompts, resources and
// server-to-client requests (sampling, elicitation) are not proxied. When
// the upstream ends its session, Serve answers the calls in flight, then
// returns ErrUpstreamEnded.
//
// Imports: client (the ledger, the registry and the scrubbing), ledger
// (types only) and the MCP SDK; never a store, the api or the service's
// heavy modules (make lint checks).
//
// Concurrency: tool calls are served concurrently; each is one claim, at
// most one upstream call and one report, on the SDK's goroutine for the
// request. A Gate owns two goroutines besides: one that notes the end of
// the upstream session (ended by Close) and a refresh per upstream
// list_changed (bounded, and waited for by Close).
package mcpgate
