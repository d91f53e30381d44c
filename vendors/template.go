package vendors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Vars are the values a template may name: {local_id}, {vendor_key},
// {receipt_id}, {first_seen_unix}.
type Vars struct {
	LocalID   string
	VendorKey string
	ReceiptID string
	// FirstSeen is the row's first_seen_at ({first_seen_unix}, whole
	// seconds): where a lookup that lists a range starts.
	FirstSeen time.Time
}

func (v Vars) replacer(escape func(string) string) *strings.Replacer {
	return strings.NewReplacer(
		"{local_id}", escape(v.LocalID),
		"{vendor_key}", escape(v.VendorKey),
		"{receipt_id}", escape(v.ReceiptID),
		"{first_seen_unix}", escape(firstSeenUnix(v.FirstSeen)),
	)
}

func firstSeenUnix(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.Unix(), 10)
}

// ExpandURL fills a URL template: each value URL-encoded (as a path
// segment, which is also safe in a query).
func ExpandURL(tmpl string, v Vars) string {
	return v.replacer(url.PathEscape).Replace(tmpl)
}

// ExpandBody fills a JSON body template: each value escaped as the inside
// of a JSON string.
func ExpandBody(tmpl string, v Vars) string {
	return v.replacer(func(s string) string {
		b, _ := json.Marshal(s)
		return string(b[1 : len(b)-1])
	}).Replace(tmpl)
}

// LookupPath reads the value at a dotted path of a decoded JSON document (from
// json.Decoder with UseNumber); "$" or "" is the document. A numeric
// segment indexes an array.
func LookupPath(doc any, path string) (any, bool) {
	if path == "" || path == "$" {
		return doc, true
	}
	cur := doc
	for _, seg := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// Scalar turns a JSON scalar into text: a string as is, a number as
// written, a boolean as true/false; ok is false for null, objects, arrays.
func Scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// DecodeJSON decodes a vendor's answer keeping numbers as written (a
// Zendesk ticket id is a 64-bit integer).
func DecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// SetPath returns the JSON object body with value set as a string at the
// dotted path, making the objects on the way. The body must be a JSON
// object (an empty body is {}).
func SetPath(body []byte, path, value string) ([]byte, error) {
	if !utf8.ValidString(path) || !utf8.ValidString(value) {
		// JSON would carry them as U+FFFD: the key would land elsewhere.
		return nil, fmt.Errorf("path and value must be UTF-8")
	}
	var doc map[string]any
	if len(bytes.TrimSpace(body)) == 0 {
		doc = map[string]any{}
	} else {
		v, err := DecodeJSON(body)
		if err != nil {
			return nil, fmt.Errorf("body is not JSON: %w", err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("body is not a JSON object")
		}
		doc = m
	}
	segs := strings.Split(path, ".")
	cur := doc
	for _, seg := range segs[:len(segs)-1] {
		next, ok := cur[seg].(map[string]any)
		if !ok {
			if cur[seg] != nil {
				return nil, fmt.Errorf("%s: not an object", path)
			}
			next = map[string]any{}
			cur[seg] = next
		}
		cur = next
	}
	cur[segs[len(segs)-1]] = value
	return json.Marshal(doc)
}
