// Package policy compiles and evaluates a registered tool's policy: a CEL
// expression (github.com/google/cel-go, the expression language Kubernetes
// uses for admission policy) over the claim's `intent` (the JSON object,
// integers as int, other numbers as double), `tool`, `run_id` and `tenant`.
// A claim for which the policy is false goes to approval with the
// expression as its reason (docs/architecture.md §11).
//
// Compile checks the expression against those four variables and refuses
// one that does not parse, names anything else or is not boolean, with an
// invalid-input error (ledger.ErrInvalidPolicy) whose text names each
// problem's line and column. Eval runs a compiled Program under a cost
// limit (DefaultCostLimit) and a deadline (DefaultTimeout); any error — a
// missing intent field, a type mismatch, the cost or the deadline — is
// returned, and the caller sends the claim to approval: an evaluation error
// never lets a claim proceed.
//
// Imports: ledger (the error) and cel-go.
//
// Concurrency: a Program is immutable and safe for concurrent use; Compile
// and Eval may be called from any goroutine.
package policy
