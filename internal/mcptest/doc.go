// Package mcptest is an upstream MCP server for the MCP gate's tests, built
// with the official Go SDK (github.com/modelcontextprotocol/go-sdk) like any
// real one, that records every tools/call it receives, so a test counts the
// side effects that reached it:
//
//   - send_email (a write whose key is the argument idempotency_key; a
//     repeated key answers the first email's id, as a vendor replays),
//   - create_ticket (a write whose key is the argument client_ref, a name
//     no scrubber knows),
//   - slow_email (a write that commits, then hangs until the call is
//     cancelled: a timeout after the vendor committed),
//   - reject_email (a write the tool refuses with an error result),
//   - big_report (a write whose result is as large as asked),
//   - fail_email (a write that answers a JSON-RPC error of the code asked),
//   - get_email (a read whose message_id argument is a lookup, not a key).
//
// NewServer serves it in the test's process (over an in-memory transport);
// a test binary whose TestMain calls RunChild first serves it as a child
// process over stdio (Command is that command line), recording to a file
// that ReadLog reads. The file is appended one JSON line per call, each
// written whole before the call answers.
//
// Imports: the MCP SDK and the standard library. Only _test.go files import
// it (scripts/importcheck.sh fails any other build that does).
//
// Concurrency: a Log is safe for concurrent use; the server's handlers run
// on the SDK's goroutines.
package mcptest
