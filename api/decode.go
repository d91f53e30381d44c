package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/internal/httpbody"
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
	if b, ok := req.Body.(*readBodyOnce); ok { // read (and limited) by the Idempotency-Key middleware
		return b.data, nil
	}
	data, err := httpbody.ReadUpTo(req.Body, limit+1, req.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, newError(http.StatusBadRequest, apierror.CodeBadBody, "could not read the request body")
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(limit)
	}
	return data, nil
}

// strictQuery refuses a query string that does not parse (a bare "%", a
// "%zz", a ";" separator): echo's QueryParams drops such pairs silently, so
// GET /v1/claims?status=failed_poison; would list every row and
// ?wait=2s%zz would not wait.
func strictQuery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := parseableQuery(c); err != nil {
			return err
		}
		return next(c)
	}
}

// parseableQuery is strictQuery's check (dispatch calls it directly). Most
// requests have no query, and parsing none would still allocate a map.
func parseableQuery(c echo.Context) error {
	q := c.Request().URL.RawQuery
	if q == "" {
		return nil
	}
	if _, err := url.ParseQuery(q); err != nil {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "malformed query string")
	}
	return nil
}

// bind reads the request body under the server's limit and decodes it
// strictly into v (see decodeStrict).
func (s *Server) bind(c echo.Context, v any) error {
	data, err := readBody(c, s.bodyLimit)
	if err != nil {
		return err
	}
	return decodeStrict(data, v)
}

func tooLarge(limit int64) *Error {
	return newError(http.StatusRequestEntityTooLarge, apierror.CodeBodyTooLarge, fmt.Sprintf("request body larger than %d bytes", limit))
}

// strictJSON refuses unknown member names, here and in nested objects.
// encoding/json/v2 semantics do the rest of the strictness this API wants
// (and encoding/json does not): names match case-sensitively, a duplicate
// name is an error rather than last-one-wins, invalid UTF-8 is an error
// rather than U+FFFD, and so is anything after the top-level value. So
// {"Key": …, "key": …} never means something a human reading the body
// would not expect. It is also a single pass, about a third of the cost of
// encoding/json's strict decoder alone on a claim body, which could not
// refuse duplicates or case variants (api.BenchmarkDecodeClaim).
var strictJSON = jsonv2.RejectUnknownMembers(true)

// decodeStrict decodes one JSON object into v: no unknown, case-variant or
// duplicate fields, no trailing data, and types that fit v. Every failure
// is a 400 bad_json whose message names the field, not a Go type.
func decodeStrict(data []byte, v any) error {
	body := bytes.TrimLeft(data, " \t\r\n")
	if len(body) == 0 {
		return badJSON("empty body: want a JSON object")
	}
	if body[0] != '{' {
		// A top-level null would otherwise decode as an empty object.
		return badJSON("the body must be a JSON object")
	}
	if err := jsonv2.Unmarshal(data, v, strictJSON); err != nil {
		return badJSON(decodeMessage(err))
	}
	return nil
}

func badJSON(msg string) *Error { return newError(http.StatusBadRequest, apierror.CodeBadJSON, msg) }

// decodeMessage describes a decoding error by field path and byte offset,
// without Go type names.
func decodeMessage(err error) string {
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	case errors.Is(err, jsonv2.ErrUnknownName):
		return "unknown field " + fieldOf(err)
	case errors.Is(err, jsontext.ErrDuplicateName):
		return "duplicate field " + fieldOf(err)
	case errors.As(err, &sy):
		if strings.Contains(sy.Err.Error(), "after top-level value") {
			return fmt.Sprintf("trailing data after the JSON object at byte %d", sy.ByteOffset)
		}
		return fmt.Sprintf("invalid JSON at byte %d: %v", sy.ByteOffset, sy.Err)
	case errors.As(err, &se):
		if se.JSONKind != 0 {
			return fmt.Sprintf("field %s has the wrong type (got a JSON %s)", quoteField(pointerPath(se.JSONPointer)), kindName(se.JSONKind))
		}
		return fmt.Sprintf("field %s has an invalid value", quoteField(pointerPath(se.JSONPointer)))
	}
	return "invalid JSON"
}

// fieldOf is the quoted dotted path of the member an error points at.
func fieldOf(err error) string {
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &se):
		return quoteField(pointerPath(se.JSONPointer))
	case errors.As(err, &sy):
		return quoteField(pointerPath(sy.JSONPointer))
	}
	return `""`
}

// pointerPath turns the JSON pointer /expect/currency into expect.currency.
func pointerPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// kindName names a JSON kind as a user would ("a JSON string").
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

// quoteField quotes a field name for a message, shortened: it is the
// caller's own input, echoed back, and need not be echoed whole.
func quoteField(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
