package ledger

import (
	"encoding/json"
	"strconv"
	"time"
)

// A row's JSON is written on every claim twice over: the API's answer and
// the PostgreSQL store's document. encoding/json's reflection over a Row
// was a tenth of a claim's CPU in the handler (BENCHMARKS.md, issue 31), so
// AppendRowJSON writes the same bytes by hand: the fields in Row's order
// with its omitempty / omitzero rules, strings that need no escaping as
// they are, and everything else — a string with a quote, a control or an
// HTML character, the nested request, expect, resolution, approval and
// alerts, a time outside RFC 3339 — through encoding/json itself, so the
// rules stay its own. TestRowJSONAsEncodingJSON holds it to encoding/json
// byte for byte; TestRowJSONKnowsEveryRowField fails when Row gains a field
// this file does not write.

// AppendRowJSON appends r as encoding/json marshals it.
func AppendRowJSON(b []byte, r *Row) ([]byte, error) {
	var err error
	// key appends the separator and a member's name, which the three below
	// share.
	key := func(name string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	str := func(name, s string, omitEmpty bool) {
		if omitEmpty && s == "" {
			return
		}
		key(name)
		b = AppendJSONString(b, s)
	}
	tm := func(name string, t time.Time, omitZero bool) {
		if err != nil || omitZero && t.IsZero() {
			return
		}
		key(name)
		b, err = AppendJSONTime(b, t)
	}
	nested := func(name string, v any) {
		if err != nil {
			return
		}
		key(name)
		b, err = appendMarshal(b, v)
	}
	b = append(b, `{"tenant":`...)
	b = AppendJSONString(b, r.Tenant)
	str("key", r.Key, false)
	str("intent_fingerprint", r.IntentFingerprint, false)
	str("metadata_local_id", r.MetadataLocalID, false)
	str("run_id", r.RunID, false)
	str("tool", r.Tool, false)
	str("tool_call_id", r.ToolCallID, true)
	str("vendor", r.Vendor, false)
	str("tool_class", string(r.ToolClass), false)
	str("status", string(r.Status), false)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	str("vendor_key", r.VendorKey, true)
	str("upstream_receipt_id", r.UpstreamReceiptID, true)
	if r.IdempotentReplayed {
		b = append(b, `,"idempotent_replayed":true`...)
	}
	if r.VendorShouldRetry != nil {
		b = append(b, `,"vendor_should_retry":`...)
		b = strconv.AppendBool(b, *r.VendorShouldRetry)
	}
	if r.LastHTTPStatus != 0 {
		b = append(b, `,"last_http_status":`...)
		b = strconv.AppendInt(b, int64(r.LastHTTPStatus), 10)
	}
	str("result", r.Result, true)
	tm("first_seen_at", r.FirstSeenAt, false)
	tm("updated_at", r.UpdatedAt, false)
	tm("succeeded_at", r.SucceededAt, true)
	tm("paged_at", r.PagedAt, true)
	tm("pending_until", r.PendingUntil, true)
	tm("replay_window_until", r.ReplayWindowUntil, true)
	tm("next_check_at", r.NextCheckAt, true)
	str("compensation_of", r.CompensationOf, true)
	str("compensation_action", r.CompensationAction, true)
	if r.Request != nil {
		nested("request", r.Request)
	}
	if r.Expect != nil {
		nested("expect", r.Expect)
	}
	if r.Resolution != nil {
		nested("resolution", r.Resolution)
	}
	str("autonomy", string(r.Autonomy), true)
	if r.Approval != nil {
		nested("approval", r.Approval)
	}
	if len(r.Alerts) > 0 {
		nested("alerts", r.Alerts)
	}
	str("traceparent", r.Traceparent, true)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// AppendJSONString appends s quoted: as it is when no byte of it needs
// escaping under encoding/json's rules (printable ASCII but for the quote,
// the backslash and the HTML characters), else as encoding/json writes it.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			out, _ := appendMarshal(b, s) // a string always marshals
			return out
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendJSONTime appends t as encoding/json does (RFC 3339 with
// nanoseconds), when that is plainly what it writes: a UTC offset and a
// four-digit year; any other time goes through encoding/json, which also
// refuses what RFC 3339 cannot say.
func AppendJSONTime(b []byte, t time.Time) ([]byte, error) {
	if _, off := t.Zone(); off != 0 || t.Year() < 0 || t.Year() > 9999 {
		return appendMarshal(b, t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendMarshal appends encoding/json's encoding of v.
func appendMarshal(b []byte, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, data...), nil
}
