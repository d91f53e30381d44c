// Package yamlnode holds what the strict YAML decoders share — the
// configuration file's (cmd/reconciler/internal/config), the tools
// command's registry file and the vendor profiles' (vendors): reading
// exactly one YAML document without letting a panic in yaml.v3 crash the
// program; walking a mapping node while refusing what would hide where a
// value came from (duplicate keys, non-string keys, merge keys); the
// struct-tag walk that maps a key to its field (FieldByName, FieldNames);
// and the strict walk itself (Decoder, SetScalar) that the configuration
// file and the vendor profiles decode with. Each decoder keeps its own
// error type and states only where its rules differ: Scalars (whole
// numbers, negative durations, what a null means, how much of a value an
// error quotes), Expand (${VAR}), Hook (a value that reads its own YAML)
// and NewItem (list defaults). The tools command's registry has its own
// walk: it reads JSON-tagged ledger types and checks YAML tags.
//
// It imports yaml.v3 and the standard library only. Its functions are
// pure and safe for concurrent use; a Decoder is used by one goroutine at
// a time.
package yamlnode
