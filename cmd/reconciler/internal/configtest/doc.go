// Package configtest holds what the tests of the configuration
// (cmd/reconciler/internal/config) and of the program (cmd/reconciler)
// share: the environment testdata/full.yaml needs, an injected environment,
// and writing and reading the small files both hand the program.
//
// Imports: the standard library only. Only _test.go files import it
// (scripts/importcheck.sh fails any other build that does).
//
// Concurrency: it holds no state; FullEnv returns a fresh map each call,
// so tests may change theirs.
package configtest
