package webhooks

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// A template is the text of a preset's signed bytes or of one of its event
// fields: literals and placeholders, concatenated.
//
//	{body}         the raw body, as received
//	{ts}           the timestamp, as sent (timestamp.source)
//	{url}          the URL the vendor signs: the configured url, never the Host
//	{method}       the request's method
//	{header:Name}  a request header
//	{json:path}    a value of the JSON (or form) body; in a batch, of the element
//	{query:name}   a query parameter of the signed URL
//	{body_sha256}  hex SHA-256 of the raw body (an event id of last resort)
//	{index}        the element's position in a batch
//
// "{{" is a literal "{". Anything else in braces is refused when the
// preset is loaded, so a typo never signs the wrong bytes.
type template []part

type partKind uint8

const (
	partLiteral partKind = iota
	partBody
	partTS
	partURL
	partMethod
	partHeader
	partJSON
	partQuery
	partBodySHA256
	partIndex
)

type part struct {
	kind partKind
	arg  string // the literal, header name, JSON path or query name
}

// maxTemplateLen bounds a template's text; presets are short.
const maxTemplateLen = 1024

// parseTemplate parses a template. allowed says which placeholders the
// template may use (signed bytes may not use {index}; event fields may not
// use {body} or {ts}).
func parseTemplate(s string, allowed func(partKind) bool) (template, error) {
	if len(s) > maxTemplateLen {
		return nil, fmt.Errorf("template longer than %d bytes", maxTemplateLen)
	}
	var t template
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t = append(t, part{kind: partLiteral, arg: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i += 2
			continue
		case c == '}':
			return nil, fmt.Errorf("template %q: unmatched } at byte %d", s, i)
		case c != '{':
			lit.WriteByte(c)
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("template %q: unterminated { at byte %d", s, i)
		}
		p, err := parsePlaceholder(s[i+1 : i+end])
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", s, err)
		}
		if allowed != nil && !allowed(p.kind) {
			return nil, fmt.Errorf("template %q: {%s} is not allowed here", s, s[i+1:i+end])
		}
		flush()
		t = append(t, p)
		i += end + 1
	}
	flush()
	return t, nil
}

func parsePlaceholder(s string) (part, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	simple := map[string]partKind{"body": partBody, "ts": partTS, "url": partURL, "method": partMethod, "body_sha256": partBodySHA256, "index": partIndex}
	if k, ok := simple[name]; ok && !hasArg {
		return part{kind: k}, nil
	}
	withArg := map[string]partKind{"header": partHeader, "json": partJSON, "query": partQuery}
	k, ok := withArg[name]
	if !ok || !hasArg {
		return part{}, fmt.Errorf("unknown placeholder {%s} (want body, ts, url, method, body_sha256, index, header:Name, json:path or query:name)", s)
	}
	if arg == "" || strings.ContainsAny(arg, "{ ") {
		return part{}, fmt.Errorf("placeholder {%s}: empty or malformed argument", s)
	}
	if k == partHeader {
		arg = http.CanonicalHeaderKey(arg)
	}
	return part{kind: k, arg: arg}, nil
}

// uses reports whether t has a placeholder of kind k.
func (t template) uses(k partKind) bool {
	for _, p := range t {
		if p.kind == k {
			return true
		}
	}
	return false
}

// request is what a template reads from one delivery.
type request struct {
	method string
	header http.Header
	body   []byte
	ts     string
	// url is the signed URL; query its parsed query.
	url   string
	query url.Values
	// doc is the decoded body (JSON, or a form as a map of first values).
	doc any
	// bodySum caches {body_sha256}.
	bodySum string
}

// render appends the template's bytes to dst. A placeholder with no value
// renders as nothing (a missing header signs as the vendor would not, and
// fails the comparison).
func (t template) render(dst []byte, r *request, elem any, index int) []byte {
	for _, p := range t {
		v, _ := p.value(r, elem, index)
		dst = append(dst, v...)
	}
	return dst
}

// resolve renders the template and reports whether every placeholder had a
// value: an event field's alternatives are tried in order, and the first
// that resolves wins.
func (t template) resolve(r *request, elem any, index int) (string, bool) {
	var b strings.Builder
	for _, p := range t {
		v, ok := p.value(r, elem, index)
		if !ok {
			return "", false
		}
		b.WriteString(v)
	}
	return b.String(), true
}

func (p part) value(r *request, elem any, index int) (string, bool) {
	switch p.kind {
	case partLiteral:
		return p.arg, true
	case partBody:
		return string(r.body), len(r.body) > 0
	case partTS:
		return r.ts, r.ts != ""
	case partURL:
		return r.url, r.url != ""
	case partMethod:
		return r.method, r.method != ""
	case partHeader:
		v := r.header.Get(p.arg)
		return v, v != ""
	case partJSON:
		v, ok := lookupScalar(elem, p.arg)
		return v, ok && v != ""
	case partQuery:
		v := r.query.Get(p.arg)
		return v, v != ""
	case partBodySHA256:
		if r.bodySum == "" {
			sum := sha256.Sum256(r.body)
			r.bodySum = hex.EncodeToString(sum[:])
		}
		return r.bodySum, true
	case partIndex:
		return strconv.Itoa(index), true
	}
	return "", false
}

// alternatives is an event field: templates tried in order.
type alternatives []template

func parseAlternatives(list []string, allowed func(partKind) bool) (alternatives, error) {
	out := make(alternatives, 0, len(list))
	for _, s := range list {
		t, err := parseTemplate(s, allowed)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// first returns the first alternative that resolves, or "".
func (a alternatives) first(r *request, elem any, index int) string {
	for _, t := range a {
		if v, ok := t.resolve(r, elem, index); ok {
			return v
		}
	}
	return ""
}

// lookupScalar returns the value at a dotted path (see LookupPath) as text:
// a string as is, a number in decimal without exponent (Adyen's
// amount.value, Linear's webhookTimestamp), a boolean as true/false. An
// object, an array, null or nothing is not a scalar.
func lookupScalar(doc any, path string) (string, bool) {
	node := doc
	for step := range strings.SplitSeq(path, ".") {
		switch n := node.(type) {
		case map[string]any:
			node = n[step]
		case []any:
			node = arrayStep(n, step)
		default:
			return "", false
		}
	}
	switch v := node.(type) {
	case string:
		return v, true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}
