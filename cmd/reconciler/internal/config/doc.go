// Package config is the configuration of `reconciler serve`: every setting
// of docs/architecture.md §9, where it comes from, and whether it is any good.
//
//   - Config holds the settings and the config file's tenants, tokens,
//     webhook endpoints, paging and event-type tables; Default is the
//     working single node of §8.
//   - Every setting has a flag, a RECONCILER_* environment variable and a
//     YAML key (settings.go: one table, from which the names, RegisterFlags
//     and WriteHelp derive). Load applies them in the order default < file <
//     environment < flag.
//   - The YAML file is walked as a yaml.Node tree against Config's yaml tags
//     (yaml.go), expanding ${VAR} from the environment, so that every error
//     names its line: unknown and duplicate keys, type mismatches, bad
//     durations, unset variables. Validate (validate.go) then checks values
//     and names the line, variable or flag each came from. Messages never
//     quote a secret.
//   - EnsureTokens gives a node without configured tokens its development
//     tokens from the environment or 0600 files in the data directory.
//   - Redacted, LogValue and String replace every field tagged `secret`, so
//     logging a Config cannot leak one.
//
// Imports: ledger, matcher, events and resolver for their validators and
// types, never a store, the api or webhooks (make lint checks); from
// outside, yaml.v3. Being internal, it serves cmd/reconciler alone.
//
// Concurrency: a Config is a plain value, safe to share once loaded; Load,
// Parse and EnsureTokens write only the Config they build or are called on.
package config
