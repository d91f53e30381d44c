package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// readBody reads at most limit bytes of the request body. A longer body is
// 413 whatever its Content-Length claims, and nothing has been decoded.
func readBody(c echo.Context, limit int64) ([]byte, error) {
	req := c.Request()
	if req.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if req.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, newError(http.StatusBadRequest, "bad_body", "could not read the request body")
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(limit)
	}
	return data, nil
}

func tooLarge(limit int64) *Error {
	return newError(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body larger than %d bytes", limit))
}

// shape lists the fields an object may carry; a nil shape accepts any value.
// It exists because encoding/json matches field names case-insensitively
// and keeps the last of duplicate keys: {"Key": …, "key": …} must not mean
// something a human reading the body would not expect.
type shape map[string]shape

// decodeStrict decodes one JSON object into v: no unknown, case-variant or
// duplicate fields (checked against s, recursively), no trailing data, and
// types that fit v. Every failure is a 400 bad_json.
func decodeStrict(data []byte, s shape, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return badJSON("empty body: want a JSON object")
		}
		return badJSON(syntaxMessage(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badJSON("trailing data after the JSON object")
	}
	if err := checkShape(raw, s, ""); err != nil {
		return err
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badJSON(syntaxMessage(err))
	}
	return nil
}

func badJSON(msg string) *Error { return newError(http.StatusBadRequest, "bad_json", msg) }

// checkShape walks one object level of raw against s. Values whose shape is
// nil are not looked into; a null stands for an absent optional object.
func checkShape(raw json.RawMessage, s shape, path string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return badJSON(syntaxMessage(err))
	}
	if tok == nil && path != "" {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if path == "" {
			return badJSON("the body must be a JSON object")
		}
		return badJSON(fmt.Sprintf("field %q must be an object", path))
	}
	seen := make(map[string]bool, len(s))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badJSON(syntaxMessage(err))
		}
		name, _ := tok.(string)
		full := name
		if path != "" {
			full = path + "." + name
		}
		sub, ok := s[name]
		if !ok {
			return badJSON(fmt.Sprintf("unknown field %s", quoteField(full)))
		}
		if seen[name] {
			return badJSON(fmt.Sprintf("duplicate field %s", quoteField(full)))
		}
		seen[name] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return badJSON(syntaxMessage(err))
		}
		if sub != nil {
			if err := checkShape(val, sub, full); err != nil {
				return err
			}
		}
	}
	return nil
}

// quoteField quotes a field name for a message, shortened: it is the
// caller's own input, echoed back, and need not be echoed whole.
func quoteField(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// syntaxMessage describes a decoding error without Go type names.
func syntaxMessage(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %s has the wrong type (got a JSON %s)", quoteField(te.Field), te.Value)
		}
		return fmt.Sprintf("wrong JSON type (got a JSON %s)", te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return "invalid JSON"
}
