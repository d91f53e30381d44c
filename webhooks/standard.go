package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StandardEndpoint is one Standard Webhooks sender (Resend and others):
// POST /webhooks/standard/{Name}.
type StandardEndpoint struct {
	Name   string
	Tenant string
	// Secrets are whsec_<base64> strings; the HMAC key is the decoded bytes.
	// Several while one is rotated.
	Secrets []string
	// Tolerance bounds webhook-timestamp either way (default DefaultTolerance).
	Tolerance time.Duration
	// LocalIDPath is the dotted path in the body where the sender echoes our
	// local id (default DefaultLocalIDPath). See LookupPath.
	LocalIDPath string
	// Vendor is the ledger vendor of the rows this sender resolves (default Name).
	Vendor string
}

// DefaultLocalIDPath is where Resend echoes the tags an email was sent with.
const DefaultLocalIDPath = "data.tags.metadata_local_id"

// The Standard Webhooks headers; svix-* are the same scheme under Svix's
// own names, which senders on Svix's platform may still send.
const (
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"
)

// maxStandardSignatures bounds the work one header can ask for.
const maxStandardSignatures = 16

// StandardHeaders are the parsed Standard Webhooks headers.
type StandardHeaders struct {
	ID        string
	Timestamp int64
	// V1 are the decoded v1 signatures; v1a (asymmetric) and unknown
	// versions are dropped.
	V1 [][]byte
}

// ParseStandardHeaders reads webhook-id, webhook-timestamp and
// webhook-signature (or their svix-* twins). A missing id or timestamp, or
// a timestamp that is not an integer, is ErrUnparsable; a missing
// signature, or one without a well-formed v1 entry, is ErrBadSignature.
func ParseStandardHeaders(h http.Header) (StandardHeaders, error) {
	get := func(name string) string {
		if v := h.Get(name); v != "" {
			return v
		}
		return h.Get("svix-" + strings.TrimPrefix(name, "webhook-"))
	}
	var s StandardHeaders
	s.ID = get(headerWebhookID)
	if s.ID == "" {
		return StandardHeaders{}, fmt.Errorf("%w: no webhook-id", ErrUnparsable)
	}
	ts, err := strconv.ParseInt(get(headerWebhookTimestamp), 10, 64)
	if err != nil {
		return StandardHeaders{}, fmt.Errorf("%w: webhook-timestamp not an integer", ErrUnparsable)
	}
	s.Timestamp = ts
	for entry := range strings.FieldsSeq(get(headerWebhookSignature)) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" || len(s.V1) == maxStandardSignatures {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(b) != sha256.Size {
			continue
		}
		s.V1 = append(s.V1, b)
	}
	if len(s.V1) == 0 {
		return StandardHeaders{}, fmt.Errorf("%w: no v1 entry in webhook-signature", ErrBadSignature)
	}
	return s, nil
}

// ParseStandardSecret returns the HMAC key of a whsec_<base64> secret. The
// prefix is optional, as in the reference libraries.
func ParseStandardSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("standard webhooks secret: want whsec_<base64>")
	}
	return key, nil
}

// VerifyStandard checks a Standard Webhooks delivery: the signature over
// "<id>.<timestamp>.<raw body>" with each key against each v1 entry in
// constant time, then the timestamp against tolerance both ways. Like
// VerifyStripe it checks the signature first, so ErrStale is only said of
// authentic deliveries.
func VerifyStandard(h http.Header, body []byte, keys [][]byte, tolerance time.Duration, now time.Time) (StandardHeaders, error) {
	sh, err := ParseStandardHeaders(h)
	if err != nil {
		return StandardHeaders{}, err
	}
	prefix := []byte(sh.ID + "." + strconv.FormatInt(sh.Timestamp, 10) + ".")
	signed := false
	for _, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write(prefix)
		mac.Write(body)
		want := mac.Sum(nil)
		for _, got := range sh.V1 {
			if hmac.Equal(got, want) {
				signed = true
			}
		}
	}
	if !signed {
		return StandardHeaders{}, fmt.Errorf("%w: no v1 signature matches a secret of the endpoint", ErrBadSignature)
	}
	if err := checkSkew(time.Unix(sh.Timestamp, 0), now, tolerance); err != nil {
		return StandardHeaders{}, err
	}
	return sh, nil
}

// standardBody is the common envelope of Standard Webhooks senders
// (Resend: {type, created_at, data}).
type standardBody struct {
	Type string `json:"type"`
	// CreatedAt and Timestamp are RFC 3339 strings for Resend, Unix
	// milliseconds for some other senders: kept raw, so a shape we do not
	// read drops the field instead of refusing the event.
	CreatedAt json.RawMessage `json:"created_at"`
	Timestamp json.RawMessage `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// DecodeStandard decodes a verified Standard Webhooks body into an Event.
// The event id is the webhook-id header (stable across the sender's
// retries); the type is the body's "type"; the local id is read at
// localIDPath (default DefaultLocalIDPath). The object id is data.email_id
// (Resend's message id, what its send API returned), else data.id.
func DecodeStandard(body []byte, id, vendor, localIDPath string) (Event, error) {
	if localIDPath == "" {
		localIDPath = DefaultLocalIDPath
	}
	var sb standardBody
	if err := decodeEvent(body, &sb); err != nil {
		return Event{}, fmt.Errorf("%w: standard webhooks body: %v", ErrUnparsable, err)
	}
	if sb.Type == "" {
		return Event{}, fmt.Errorf("%w: standard webhooks body: no type", ErrUnparsable)
	}
	var doc any
	if err := decodeEvent(body, &doc); err != nil {
		return Event{}, fmt.Errorf("%w: standard webhooks body: %v", ErrUnparsable, err)
	}
	ev := Event{
		Vendor:  vendor,
		ID:      id,
		Type:    sb.Type,
		LocalID: LookupPath(doc, localIDPath),
		Raw:     body,
	}
	if ev.ObjectID = LookupPath(doc, "data.email_id"); ev.ObjectID == "" {
		ev.ObjectID = LookupPath(doc, "data.id")
	}
	for _, raw := range []json.RawMessage{sb.CreatedAt, sb.Timestamp} {
		if t, ok := standardTime(raw); ok {
			ev.Created = t
			break
		}
	}
	return ev, nil
}

// standardTime reads a sender's event time: an RFC 3339 string, or a JSON
// number of Unix seconds (below 1e11) or milliseconds. Anything else is no
// time.
func standardTime(raw json.RawMessage) (time.Time, bool) {
	var s string
	if decodeEvent(raw, &s) == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		return t.UTC(), err == nil
	}
	var n int64
	if decodeEvent(raw, &n) != nil || n <= 0 {
		return time.Time{}, false
	}
	if n < 1e11 {
		return time.Unix(n, 0).UTC(), true
	}
	return time.UnixMilli(n).UTC(), true
}

// LookupPath returns the string at a dotted path in a decoded JSON
// document, or "". An object step is a key; on an array a step is an index
// or, for an array of {"name": …, "value": …} pairs (Resend's tags as the
// send API takes them), the value of the pair with that name. So
// "data.tags.metadata_local_id" finds the local id both in
// {"tags": {"metadata_local_id": "rl_…"}} and in
// {"tags": [{"name": "metadata_local_id", "value": "rl_…"}]}.
func LookupPath(doc any, path string) string {
	node := doc
	for step := range strings.SplitSeq(path, ".") {
		switch n := node.(type) {
		case map[string]any:
			node = n[step]
		case []any:
			node = arrayStep(n, step)
		default:
			return ""
		}
	}
	s, _ := node.(string)
	return s
}

func arrayStep(a []any, step string) any {
	if i, err := strconv.Atoi(step); err == nil {
		if i >= 0 && i < len(a) {
			return a[i]
		}
		return nil
	}
	for _, el := range a {
		if m, ok := el.(map[string]any); ok && m["name"] == step {
			return m["value"]
		}
	}
	return nil
}
