package yamlnode

import (
	"encoding"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Scalars are a decoder's rules for turning a scalar's text into a value.
// The zero value is the configuration file's rules; each field loosens or
// tightens one of them, so a package states only where it differs.
type Scalars struct {
	// Ints lets int fields read whole numbers. Without it an int field is
	// not a scalar: Decoder reports it as an internal error.
	Ints bool
	// NoNegativeDurations refuses a time.Duration below zero.
	NoNegativeDurations bool
	// BlankIsZero sets a time.Duration or a TextUnmarshaler whose text is
	// blank (a null) to its zero value, and reads (and quotes) a duration's
	// text trimmed. Without it a blank duration is invalid and a
	// TextUnmarshaler is handed "".
	BlankIsZero bool
	// RawText hands a TextUnmarshaler the text as written (its own errors
	// then quote what the user wrote); without it, trimmed of spaces.
	RawText bool
	// QuoteLimit is the most bytes of a value an error quotes (longer ones
	// are cut with Truncate); 0 quotes the whole value.
	QuoteLimit int
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// isScalar reports whether t is read from a single value under r.
func (r Scalars) isScalar(t reflect.Type) bool {
	return t == durationType || reflect.PointerTo(t).Implements(textUnmarshalerType) ||
		t.Kind() == reflect.String || t.Kind() == reflect.Bool || (r.Ints && t.Kind() == reflect.Int)
}

func (r Scalars) quote(s string) string {
	if r.QuoteLimit > 0 {
		s = Truncate(s, r.QuoteLimit)
	}
	return strconv.Quote(s)
}

// SetScalar parses s into v (addressable) under r: a Go duration, a
// TextUnmarshaler, a string, a boolean or (with r.Ints) an int. Its errors
// quote s: a caller reading a secret replaces them.
func SetScalar(v reflect.Value, s string, r Scalars) error {
	t := v.Type()
	switch {
	case t == durationType:
		text := strings.TrimSpace(s)
		if r.BlankIsZero {
			if text == "" {
				v.SetInt(0)
				return nil
			}
			s = text
		}
		dur, err := time.ParseDuration(text)
		if err != nil || (r.NoNegativeDurations && dur < 0) {
			return fmt.Errorf("invalid duration %s: want a Go duration such as 90s or 15m", r.quote(s))
		}
		v.SetInt(int64(dur))
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		if r.BlankIsZero && strings.TrimSpace(s) == "" {
			v.SetZero()
			return nil
		}
		if !r.RawText {
			s = strings.TrimSpace(s)
		}
		return v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s))
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("invalid boolean %s: want true or false", r.quote(s))
		}
		v.SetBool(b)
	case r.Ints && t.Kind() == reflect.Int:
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("invalid number %s: want a whole number", r.quote(s))
		}
		v.SetInt(int64(i))
	default:
		return fmt.Errorf("internal error: cannot set %s", t)
	}
	return nil
}
