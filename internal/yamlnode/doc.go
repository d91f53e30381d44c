// Package yamlnode holds what the strict YAML decoders share — the
// configuration file's (cmd/reconciler/internal/config), the tools
// command's registry file and the vendor profiles' (vendors): reading
// exactly one YAML document without letting a panic in yaml.v3 crash the
// program; walking a mapping node while refusing what would hide where a
// value came from (duplicate keys, non-string keys, merge keys); and the
// struct-tag walk that maps a key to its field (FieldByName, FieldNames).
// Each decoder keeps its own error type and its own rules for values.
//
// It imports yaml.v3 and the standard library only. Its functions are
// pure and safe for concurrent use.
package yamlnode
