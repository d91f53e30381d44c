// Package vendors holds vendor profiles: what the ledger and the resolver
// need to know about one vendor's write API, as data (docs/vendors.md).
//
// A Profile says where the vendor takes our idempotency key (a header, a
// JSON body path, an object id we choose, or nowhere), how long it
// remembers it (the replay window), how long a key it accepts may be, how
// to read its answers, and how to ask it "does an object carrying my local
// id exist?" (Lookup) and "what state is this object in?" (Retrieve).
//
// Profiles come from the `vendors:` list of the configuration. An entry may
// start from a preset shipped in presets/ (one YAML file per vendor,
// embedded): the entry's keys override the preset's key by key, nested
// blocks and maps too, so `lookup: {min_age: 1s}` changes only min_age.
// Load decodes, merges and validates, naming the file, line and key of
// every problem; secrets (api_key, auth.value) never appear in an error, a
// log line or String (Redacted).
//
// VendorKey derives the key to send to the vendor from a ledger key: the
// key itself when it already fits the profile's max_key_len and
// key_format, else a deterministic digest of it that does, so every retry
// and replay sends the same one.
//
// The engine that runs a profile (resolver.Profiled) and the Go client's
// placement (client.Transport) read Profile; neither knows any vendor's
// name. Adding a vendor is one file in presets/ and one test.
//
// vendors imports the ledger (for its key rules), vendors/presets,
// internal/yamlnode (the strict YAML walk it shares with the configuration
// file) and yaml.v3. Profiles are plain values, safe to share once loaded.
package vendors
