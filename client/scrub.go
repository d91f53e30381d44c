package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// DefaultScrubFields are the argument names Scrub removes: fields through
// which a model could choose (or re-invent on every retry) the identity of
// a write. Names match case- and separator-insensitively, so
// "idempotency_key" also removes "Idempotency-Key", "idempotencyKey" and
// "IDEMPOTENCY KEY".
var DefaultScrubFields = []string{
	"idempotency_key", "x_idempotency_key", "idempotence_key",
	"request_id", "x_request_id", "client_request_id",
	"message_id", "paypal_request_id", "dedup_id", "deduplication_id",
	// The join fields belong to the ledger too: a model that fills them
	// (with another row's local id, say) sends a vendor object whose
	// webhook would settle the wrong row.
	"metadata_local_id", "custom_id",
}

// Scrubber removes idempotency fields from tool arguments and tool schemas.
// The key of a write belongs to the ledger: a model that supplies one may
// mint a fresh one on each retry and turn one intent into two charges.
type Scrubber struct {
	names map[string]bool
}

// NewScrubber returns a scrubber of the given field names (normalised:
// case and separators do not matter).
func NewScrubber(fields ...string) *Scrubber {
	s := &Scrubber{names: make(map[string]bool, len(fields))}
	for _, f := range fields {
		if n := normalize(f); n != "" {
			s.names[n] = true
		}
	}
	return s
}

var defaultScrubber = NewScrubber(DefaultScrubFields...)

// Scrub removes DefaultScrubFields from args (see Scrubber.Scrub).
func Scrub(args map[string]any) map[string]any { return defaultScrubber.Scrub(args) }

// ScrubSchema deletes DefaultScrubFields from a tool's JSON Schema (see
// Scrubber.ScrubSchema).
func ScrubSchema(schema []byte) ([]byte, error) { return defaultScrubber.ScrubSchema(schema) }

// normalize folds case and drops everything but letters and digits:
// "PayPal-Request-Id" and "paypal_request_id" are one name.
func normalize(name string) string {
	var b strings.Builder
	for _, r := range name {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// Match reports whether name is one of the scrubbed fields.
func (s *Scrubber) Match(name string) bool { return s.names[normalize(name)] }

// Scrub returns a copy of args without the scrubbed fields, at any depth
// (nested objects and objects inside arrays). args itself is not changed.
func (s *Scrubber) Scrub(args map[string]any) map[string]any {
	if args == nil {
		return nil
	}
	out, _ := s.value(args).(map[string]any)
	return out
}

func (s *Scrubber) value(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if s.Match(k) {
				continue
			}
			out[k] = s.value(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = s.value(x)
		}
		return out
	}
	return v
}

// ScrubSchema deletes the scrubbed fields from a JSON Schema shown to a
// model: every matching name under "properties" (at any depth: nested
// objects, items, $defs, anyOf…) and its entry in the sibling "required".
// The output is compact JSON with keys sorted; numbers keep their text.
func (s *Scrubber) ScrubSchema(schema []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("scrub schema: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("scrub schema: trailing data after the schema")
	}
	if _, ok := v.(map[string]any); !ok {
		if _, isBool := v.(bool); !isBool {
			return nil, fmt.Errorf("scrub schema: want an object (or a boolean schema)")
		}
	}
	s.schema(v)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("scrub schema: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// schema walks a schema in place.
func (s *Scrubber) schema(v any) {
	switch v := v.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok {
			for name := range props {
				if s.Match(name) {
					delete(props, name)
				}
			}
			if req, ok := v["required"].([]any); ok {
				kept := req[:0:0]
				for _, r := range req {
					if name, ok := r.(string); ok && s.Match(name) {
						continue
					}
					kept = append(kept, r)
				}
				v["required"] = kept
			}
		}
		for _, x := range v {
			s.schema(x)
		}
	case []any:
		for _, x := range v {
			s.schema(x)
		}
	}
}
