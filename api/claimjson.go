package api

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// The claim's answer is the API's most frequent body, and encoding/json's
// reflection over a row was a tenth of a claim's CPU in the handler
// (BENCHMARKS.md, issue 31). appendClaimResponse writes the same bytes by
// hand: the fields in ledger.Row's order with its omitempty / omitzero
// rules, strings that need no escaping as they are, and everything else —
// a string with a quote, a control or an HTML character, the nested
// request, expect, resolution, approval and alerts, a time outside
// RFC 3339 — through encoding/json itself, so the rules stay its own.
// TestClaimJSONAsEncodingJSON holds it to encoding/json byte for byte,
// and fails when ledger.Row gains a field this file does not write.

// claimJSONBufs recycles the answers' buffers.
var claimJSONBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// writeClaimJSON answers a claim (writeJSON's contract: a request with a
// query goes through c.JSON, which honours ?pretty).
func writeClaimJSON(c echo.Context, code int, v claimResponse) error {
	if viaEchoJSON(c) {
		return c.JSON(code, v)
	}
	bp := claimJSONBufs.Get().(*[]byte)
	defer claimJSONBufs.Put(bp)
	b, err := appendClaimResponse((*bp)[:0], v)
	if err != nil {
		return writeJSON(c, code, v) // encoding/json's own error, as before
	}
	*bp = b
	_, err = startJSON(c, code).Write(b)
	return err
}

// appendClaimResponse appends v's JSON and a newline, as
// json.NewEncoder(w).Encode(v) writes it.
func appendClaimResponse(b []byte, v claimResponse) ([]byte, error) {
	var err error
	b = append(b, `{"decision":`...)
	b = appendJSONString(b, string(v.Decision))
	if v.Code != "" {
		b = append(b, `,"code":`...)
		b = appendJSONString(b, v.Code)
	}
	b = append(b, `,"row":`...)
	if v.Row == nil {
		b = append(b, "null"...)
	} else if b, err = appendRowJSON(b, v.Row); err != nil {
		return nil, err
	}
	if v.ReplayWindowUntil != nil {
		b = append(b, `,"replay_window_until":`...)
		if b, err = appendJSONTime(b, *v.ReplayWindowUntil); err != nil {
			return nil, err
		}
	}
	return append(b, "}\n"...), nil
}

// rowJSONFields are ledger.Row's JSON names in its order: the ones
// appendRowJSON writes (the test compares them with the struct).
var rowJSONFields = []string{
	"tenant", "key", "intent_fingerprint", "metadata_local_id", "run_id", "tool", "tool_call_id",
	"vendor", "tool_class", "status", "attempt", "vendor_key", "upstream_receipt_id",
	"idempotent_replayed", "vendor_should_retry", "last_http_status", "result",
	"first_seen_at", "updated_at", "succeeded_at", "paged_at", "pending_until",
	"replay_window_until", "next_check_at", "compensation_of", "compensation_action",
	"request", "expect", "resolution", "autonomy", "approval", "alerts", "traceparent",
}

func appendRowJSON(b []byte, r *ledger.Row) ([]byte, error) {
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
		b = appendJSONString(b, s)
	}
	tm := func(name string, t time.Time, omitZero bool) {
		if err != nil || omitZero && t.IsZero() {
			return
		}
		key(name)
		b, err = appendJSONTime(b, t)
	}
	nested := func(name string, v any) {
		if err != nil {
			return
		}
		key(name)
		b, err = appendMarshal(b, v)
	}
	b = append(b, `{"tenant":`...)
	b = appendJSONString(b, r.Tenant)
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

// appendJSONString appends s quoted: as it is when no byte of it needs
// escaping under encoding/json's rules (printable ASCII but for the quote,
// the backslash and the HTML characters), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
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

// appendJSONTime appends t as encoding/json does (RFC 3339 with
// nanoseconds), when that is plainly what it writes: a UTC offset and a
// four-digit year; any other time goes through encoding/json, which also
// refuses what RFC 3339 cannot say.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
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
