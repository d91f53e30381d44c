package ledger

import (
	"strings"
	"unicode/utf8"
)

// Length limits of identifiers and notes.
const (
	MaxIDLen   = 128
	MaxKeyLen  = 255
	MaxNoteLen = 1024
)

// Limits the errors spell out to the caller.
const (
	maxToolCallID   = 255
	maxVendorLen    = 64
	maxRequestBody  = 256 << 10
	maxAlertsPerRow = 32
)

func validIdent(s string, max int, extra string) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func printableASCII(s string, min, max int) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ValidateTenant checks a tenant id (it is a NATS subject token).
func ValidateTenant(s string) error {
	if !validIdent(s, MaxIDLen, "_-") {
		return ErrInvalidTenant
	}
	return nil
}

// ValidateRunID checks a run_id: [A-Za-z0-9_-]{1,128} (it is a NATS subject token).
func ValidateRunID(s string) error {
	if !validIdent(s, MaxIDLen, "_-") {
		return ErrInvalidRunID
	}
	return nil
}

// validateTool checks a tool name: [A-Za-z0-9_.-]{1,128}.
func validateTool(s string) error {
	if !validIdent(s, MaxIDLen, "_.-") {
		return ErrInvalidTool
	}
	return nil
}

// ValidateKey checks a key: 1-255 printable ASCII characters, no space.
func ValidateKey(s string) error {
	if !printableASCII(s, 1, MaxKeyLen) {
		return ErrInvalidKey
	}
	return nil
}

// ValidateVendor checks a vendor name: [a-z0-9_-]{1,64}.
func ValidateVendor(s string) error {
	if len(s) == 0 || len(s) > maxVendorLen || strings.ToLower(s) != s || !validIdent(s, maxVendorLen, "_-") {
		return ErrInvalidVendor
	}
	return nil
}

func validateToolCallID(s string) error {
	if !printableASCII(s, 0, maxToolCallID) {
		return ErrInvalidToolCallID
	}
	return nil
}

// TraceparentLen is the length of a W3C traceparent of version 00, the
// only form a row keeps.
const TraceparentLen = 55

// ValidateTraceparent checks a row's trace context: empty, or a W3C
// traceparent of version 00 (https://www.w3.org/TR/trace-context/#traceparent-header):
// 00-<trace id: 32 hex>-<parent id: 16 hex>-<flags: 2 hex>, lower case,
// neither id all zeros. It is what the adapters store, formatted from a
// span context; a caller's raw header never reaches the ledger.
func ValidateTraceparent(s string) error {
	if s == "" {
		return nil
	}
	if len(s) != TraceparentLen || s[:3] != "00-" || s[35] != '-' || s[52] != '-' ||
		!lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:]) ||
		strings.Trim(s[3:35], "0") == "" || strings.Trim(s[36:52], "0") == "" {
		return ErrInvalidTraceparent
	}
	return nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func validateRequest(r *Request) error {
	if r == nil {
		return nil
	}
	switch r.Method {
	case "POST", "PUT", "PATCH", "DELETE":
	default:
		return ErrInvalidRequest.With("method must be POST, PUT, PATCH or DELETE")
	}
	if !strings.HasPrefix(r.Path, "/") || !printableASCII(r.Path, 1, 2048) {
		return ErrInvalidRequest.With("path must start with / and be printable ASCII")
	}
	if len(r.ContentType) > 255 || strings.ContainsAny(r.ContentType, "\r\n\x00") {
		return ErrInvalidRequest.With("content_type")
	}
	if len(r.Body) > maxRequestBody {
		return ErrInvalidRequest.With("body larger than %d bytes", maxRequestBody)
	}
	if !utf8.ValidString(r.Body) || hasNUL(r.Body) {
		return ErrInvalidRequest.With("body must be UTF-8 text without NUL")
	}
	return nil
}

// hasNUL reports whether s holds a NUL character. It is valid UTF-8 and
// valid JSON ("\u0000"), but PostgreSQL stores neither in text nor in
// jsonb: the bbolt store would take what PostgreSQL refuses (as a 503, for
// ever), so every store refuses it up front, as a 400.
func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

func validateExpect(e *Expect) error {
	if e == nil {
		return nil
	}
	if e.Amount < 0 || !validCurrency(e.Currency) {
		return ErrInvalidExpect
	}
	return nil
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if !(c[i] >= 'a' && c[i] <= 'z' || c[i] >= 'A' && c[i] <= 'Z') {
			return false
		}
	}
	return true
}

// ValidateAction checks a compensation action name.
func ValidateAction(s string) error {
	if !validIdent(s, MaxIDLen, "_.-") {
		return ErrInvalidAction
	}
	return nil
}
