package webhooks

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The Stripe event is read in one pass over jsontext's tokens instead of
// through reflection (stripeEvent, decodeEvent): it is the largest CPU cost
// of a delivery in the handler (BenchmarkDecodeStripe). The pass keeps
// exactly what decodeEvent does with stripeEvent under eventJSON's v1
// semantics, which TestScanStripeMatchesReflect and FuzzScanStripe check
// against it:
//
//   - the same tokenizer and options, so the same bodies are malformed;
//   - a member name matches a field exactly or case-insensitively
//     (strings.EqualFold, field); unknown members are skipped;
//   - a value of the wrong kind for a field is an error (the event is
//     unparsable), as is a non-integer or out-of-range integer;
//   - null leaves a string, a number, a bool or an object as it was, sets
//     a pointer (amount) or a map (metadata) to nil, and replaces a raw
//     value (request, payment_intent) with null;
//   - a repeated member decodes again into what the first one left
//     (objects and the metadata map merge, scalars take the last value);
//   - strings are unquoted as the reflection path does (escapes decoded,
//     invalid UTF-8 becomes U+FFFD).

// stripeFields is what DecodeStripe reads of an event.
type stripeFields struct {
	id, typ  string
	created  int64
	livemode bool

	objID, currency string
	// objCharge: data.object.object is "charge".
	objCharge bool
	// amount and amountReceived are set when has* is.
	amount, amountReceived       int64
	hasAmount, hasAmountReceived bool
	// localID is metadata[metadataKey] when that is a string.
	localID string
	// paymentIntent is data.object.payment_intent when it is a string.
	paymentIntent string
	// idempotencyKey is request.idempotency_key, read from the last
	// request member when that is an object that decodes.
	idempotencyKey string
}

// errWrongKind is a value whose kind the field cannot hold.
var errWrongKind = errors.New("value of the wrong kind")

type stripeScanner struct {
	dec         jsontext.Decoder
	buf         bytes.Buffer
	metadataKey string
	f           stripeFields
}

var stripeScanners = sync.Pool{New: func() any { return new(stripeScanner) }}

// scanStripe reads a Stripe event body in one pass.
func scanStripe(body []byte, metadataKey string) (stripeFields, error) {
	s := stripeScanners.Get().(*stripeScanner)
	defer func() {
		s.buf = bytes.Buffer{}
		s.dec.Reset(&s.buf) // drop the body
		stripeScanners.Put(s)
	}()
	s.buf = *bytes.NewBuffer(body)
	s.dec.Reset(&s.buf, eventJSON)
	s.metadataKey, s.f = metadataKey, stripeFields{}
	if err := s.top(); err != nil {
		return stripeFields{}, err
	}
	// Nothing but whitespace may follow the event.
	if _, err := s.dec.ReadToken(); err == nil {
		return stripeFields{}, errors.New("data after the top-level value")
	} else if !errors.Is(err, io.EOF) {
		return stripeFields{}, err
	}
	return s.f, nil
}

func (s *stripeScanner) top() error {
	return s.object(func(name []byte) error {
		f := &s.f
		switch field(name, eventFields) {
		case "id":
			return s.str(&f.id)
		case "type":
			return s.str(&f.typ)
		case "created":
			return s.int(&f.created, nil)
		case "livemode":
			return s.bool(&f.livemode)
		case "api_version":
			return s.str(nil)
		case "request":
			return s.request()
		case "data":
			return s.object(func(name []byte) error {
				if field(name, dataFields) == "object" {
					return s.object(s.dataObject)
				}
				return s.dec.SkipValue()
			})
		}
		return s.dec.SkipValue()
	})
}

func (s *stripeScanner) dataObject(name []byte) error {
	f := &s.f
	switch field(name, objectFields) {
	case "id":
		return s.str(&f.objID)
	case "object":
		return s.kind(&f.objCharge, "charge")
	case "amount":
		return s.int(&f.amount, &f.hasAmount)
	case "amount_received":
		return s.int(&f.amountReceived, &f.hasAmountReceived)
	case "currency":
		return s.str(&f.currency)
	case "metadata":
		return s.metadata()
	case "payment_intent":
		return s.rawString(&f.paymentIntent)
	}
	// charge is raw in stripeObject: any value, as an unknown member.
	return s.dec.SkipValue()
}

// object reads an object member by member (member reads the value), or a
// null, which leaves everything as it was.
func (s *stripeScanner) object(member func(name []byte) error) error {
	switch s.dec.PeekKind() {
	case 'n':
		_, err := s.dec.ReadToken()
		return err
	case '{':
	default:
		return s.wrongKind()
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	for s.dec.PeekKind() != '}' {
		raw, err := s.dec.ReadValue()
		if err != nil {
			return err
		}
		if err := member(unquote(raw)); err != nil {
			return err
		}
	}
	_, err := s.dec.ReadToken()
	return err
}

// wrongKind consumes the value (so a malformed one reports its syntax
// error, as reflection would first) and reports the kind mismatch.
func (s *stripeScanner) wrongKind() error {
	if _, err := s.dec.ReadValue(); err != nil {
		return err
	}
	return errWrongKind
}

// optString reads a string field: ok false for null, errWrongKind for any
// other kind of value.
func (s *stripeScanner) optString() (v []byte, ok bool, err error) {
	raw, err := s.dec.ReadValue()
	if err != nil {
		return nil, false, err
	}
	switch raw.Kind() {
	case 'n':
		return nil, false, nil
	case '"':
		return unquote(raw), true, nil
	}
	return nil, false, errWrongKind
}

// str reads a string field; a nil dst checks the kind and keeps nothing.
func (s *stripeScanner) str(dst *string) error {
	v, ok, err := s.optString()
	if ok && dst != nil {
		*dst = string(v)
	}
	return err
}

// kind reads a string field only to know whether it is want.
func (s *stripeScanner) kind(is *bool, want string) error {
	v, ok, err := s.optString()
	if ok {
		*is = string(v) == want
	}
	return err
}

// rawString is a raw member read as rawString does: a string's value, or
// "" for any other value.
func (s *stripeScanner) rawString(dst *string) error {
	raw, err := s.dec.ReadValue()
	if err != nil {
		return err
	}
	*dst = ""
	if raw.Kind() == '"' {
		*dst = string(unquote(raw))
	}
	return nil
}

// int reads an int64; has, when not nil, is a pointer's nil-ness.
func (s *stripeScanner) int(dst *int64, has *bool) error {
	raw, err := s.dec.ReadValue()
	if err != nil {
		return err
	}
	switch raw.Kind() {
	case 'n':
		if has != nil {
			*dst, *has = 0, false
		}
		return nil
	case '0':
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return errWrongKind
		}
		*dst = n
		if has != nil {
			*has = true
		}
		return nil
	}
	return errWrongKind
}

func (s *stripeScanner) bool(dst *bool) error {
	raw, err := s.dec.ReadValue()
	if err != nil {
		return err
	}
	switch raw.Kind() {
	case 'n':
	case 't':
		*dst = true
	case 'f':
		*dst = false
	default:
		return errWrongKind
	}
	return nil
}

// metadata reads the metadata map: null empties it, an object adds to it.
func (s *stripeScanner) metadata() error {
	if s.dec.PeekKind() == 'n' {
		s.f.localID = ""
		_, err := s.dec.ReadToken()
		return err
	}
	return s.object(func(name []byte) error {
		if string(name) == s.metadataKey {
			return s.rawString(&s.f.localID)
		}
		return s.dec.SkipValue()
	})
}

// request reads the raw request member as DecodeStripe reads it once the
// event is decoded: an object's idempotency_key, "" for any other value or
// an object that does not decode. A later request member replaces it.
func (s *stripeScanner) request() error {
	s.f.idempotencyKey = ""
	if s.dec.PeekKind() != '{' {
		return s.dec.SkipValue()
	}
	var key string
	mismatch := false
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	for s.dec.PeekKind() != '}' {
		raw, err := s.dec.ReadValue()
		if err != nil {
			return err
		}
		var dst *string // nil: the id, checked and not kept
		switch field(unquote(raw), requestFields) {
		case "id":
		case "idempotency_key":
			dst = &key
		default:
			if err := s.dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if err := s.str(dst); errors.Is(err, errWrongKind) {
			mismatch = true
		} else if err != nil {
			return err
		}
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return err
	}
	if !mismatch {
		s.f.idempotencyKey = key
	}
	return nil
}

// Field names of each object the scanner reads, lower-case ASCII.
var (
	eventFields   = []string{"id", "type", "created", "livemode", "api_version", "request", "data"}
	dataFields    = []string{"object"}
	objectFields  = []string{"id", "object", "amount", "amount_received", "currency", "metadata", "payment_intent"}
	requestFields = []string{"id", "idempotency_key"}
)

// maxFieldLen is the longest name in the lists above.
const maxFieldLen = len("amount_received")

// field is the name in fields that a member name matches as eventJSON
// matches them (exactly, else by strings.EqualFold, under which a
// non-ASCII name can match: "ſ" folds to "s"), or "" for none. An ASCII
// name is lower-cased on the stack, so the members nobody reads cost no
// allocation.
func field(name []byte, fields []string) string {
	var lower [maxFieldLen]byte
	n := 0
	for _, c := range name {
		if c >= utf8.RuneSelf {
			for _, f := range fields {
				if strings.EqualFold(string(name), f) {
					return f
				}
			}
			return ""
		}
		if n == len(lower) {
			return "" // ASCII and longer than every field
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[n] = c
		n++
	}
	for _, f := range fields {
		if string(lower[:n]) == f {
			return f
		}
	}
	return ""
}

// unquote is a JSON string's value, unquoted as the reflection path does:
// the bytes between the quotes when there is no escape and they are valid
// UTF-8, else jsontext's unquoting (invalid UTF-8 becomes U+FFFD; its error
// only says so). The result may alias raw.
func unquote(raw jsontext.Value) []byte {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	b, _ := jsontext.AppendUnquote(nil, raw)
	return b
}
