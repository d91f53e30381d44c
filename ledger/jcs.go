package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxIntentDepth bounds nesting so a hostile intent cannot exhaust the stack.
const maxIntentDepth = 64

// Canonicalize returns the RFC 8785 (JCS) form of a JSON text: object members
// sorted by their UTF-16 code units, no insignificant whitespace, numbers in
// ECMAScript shortest form (so 10.50 and 10.5 are the same), strings with the
// minimal escaping. Duplicate member names, invalid UTF-8, NaN-like or
// out-of-range numbers and trailing data are errors (RFC 8785 requires I-JSON).
//
// It is written here rather than imported because the fingerprint is the
// ledger's core identity and ledger imports only the standard library; the
// tests compare it with github.com/gowebpki/jcs.
func Canonicalize(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("invalid UTF-8")
	}
	if err := checkSurrogateEscapes(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonValue(dec, &buf, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return buf.Bytes(), nil
}

// canonValue writes the value that starts at the decoder's next token; depth
// counts the arrays and objects around it.
func canonValue(dec *json.Decoder, buf *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		// The bound counts containers, so 65 nested empty arrays fail the
		// same way as 65 nested arrays around a number.
		if depth >= maxIntentDepth {
			return fmt.Errorf("nesting deeper than %d", maxIntentDepth)
		}
		switch t {
		case '{':
			return canonObject(dec, buf, depth)
		case '[':
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canonValue(dec, buf, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // ']'
				return err
			}
			buf.WriteByte(']')
			return nil
		}
		return fmt.Errorf("unexpected %q", t)
	case string:
		writeJCSString(buf, t)
	case json.Number:
		s, err := formatJCSNumber(string(t))
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	}
	return nil
}

type member struct {
	name  string
	value []byte
}

func canonObject(dec *json.Decoder, buf *bytes.Buffer, depth int) error {
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok {
			return errors.New("object member name is not a string")
		}
		if seen[name] {
			return fmt.Errorf("duplicate member name %.32q", name)
		}
		seen[name] = true
		var vb bytes.Buffer
		if err := canonValue(dec, &vb, depth+1); err != nil {
			return err
		}
		members = append(members, member{name, vb.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	sort.Slice(members, func(i, j int) bool { return lessUTF16(members[i].name, members[j].name) })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeJCSString(buf, m.name)
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

// checkSurrogateEscapes rejects a \u escape that is half of a UTF-16
// surrogate pair without its other half. encoding/json decodes such an
// escape to U+FFFD, which would give "\ud800", "\udfff" and "\ufffd" one
// fingerprint; RFC 8785 §3.2.2.2 requires an error instead. Raw bytes are
// already valid UTF-8, so escapes are the only way a lone surrogate gets in.
// Malformed JSON is left for the decoder to report.
func checkSurrogateEscapes(data []byte) error {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\':
			if i+1 < len(data) && data[i+1] != 'u' {
				i++ // a one-letter escape; skip the letter (it may be a quote)
				continue
			}
			u, ok := uEscape(data, i)
			if !ok {
				continue
			}
			i += 5 // the last hex digit
			switch {
			case utf16.IsSurrogate(rune(u)) && u >= 0xdc00:
				return fmt.Errorf("lone UTF-16 surrogate \\u%04x", u)
			case utf16.IsSurrogate(rune(u)):
				low, ok := uEscape(data, i+1)
				if !ok || low < 0xdc00 || low > 0xdfff {
					return fmt.Errorf("lone UTF-16 surrogate \\u%04x", u)
				}
				i += 6
			}
		}
	}
	return nil
}

// uEscape decodes the \uXXXX escape at data[i:], if there is one.
func uEscape(data []byte, i int) (uint16, bool) {
	if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
	if err != nil {
		return 0, false
	}
	return uint16(v), true
}

// lessUTF16 orders strings by UTF-16 code units, as RFC 8785 §3.2.3 requires
// (it differs from byte order for characters above U+FFFF).
func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func writeJCSString(buf *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			buf.WriteString(`\"`)
		case r == '\\':
			buf.WriteString(`\\`)
		case r == '\b':
			buf.WriteString(`\b`)
		case r == '\f':
			buf.WriteString(`\f`)
		case r == '\n':
			buf.WriteString(`\n`)
		case r == '\r':
			buf.WriteString(`\r`)
		case r == '\t':
			buf.WriteString(`\t`)
		case r < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hex[r>>4])
			buf.WriteByte(hex[r&0xf])
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
}

// formatJCSNumber renders a JSON number the way ECMAScript's
// Number.prototype.toString does for an IEEE 754 double (RFC 8785 §3.2.2.3).
// Go's shortest round-trip digits are the same digits ECMAScript picks; only
// the exponent layout differs.
func formatJCSNumber(lit string) (string, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %.32q is out of the IEEE 754 double range", lit)
	}
	if f == 0 {
		return "0", nil // also -0
	}
	if a := math.Abs(f); a < 1e21 && a >= 1e-6 {
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // e.g. 1e+21, 1.5e-07
	mant, exp, _ := strings.Cut(s, "e")
	sign := exp[:1]
	digits := strings.TrimLeft(exp[1:], "0")
	return mant + "e" + sign + digits, nil
}
