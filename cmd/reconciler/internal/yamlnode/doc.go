// Package yamlnode holds what the configuration file's decoder and the
// tools command's registry-file decoder share: reading exactly one YAML
// document without letting a panic in yaml.v3 crash the program, and
// walking a mapping node while refusing what would hide where a value came
// from (duplicate keys, non-string keys, merge keys). Each decoder keeps its
// own reflection over its own types and its own error type.
package yamlnode
