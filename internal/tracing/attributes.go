package tracing

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/reconciler/ledger"
)

// The attributes of §12, on the service's spans and the SDK's tool spans
// alike: the ledger fields an operator needs to answer "which run sent the
// second email?" from a trace.
const (
	KeyIdempotencyKey     = attribute.Key("reconciler.idempotency_key")
	KeyIntentFingerprint  = attribute.Key("reconciler.intent_fingerprint")
	KeyStatus             = attribute.Key("reconciler.status")
	KeyDecision           = attribute.Key("reconciler.decision")
	KeyAttempt            = attribute.Key("reconciler.attempt")
	KeyUpstreamReceiptID  = attribute.Key("reconciler.upstream_receipt_id")
	KeyIdempotentReplayed = attribute.Key("reconciler.idempotent_replayed")
	KeyVendorShouldRetry  = attribute.Key("reconciler.vendor_should_retry")
	KeyFirstSeenAt        = attribute.Key("reconciler.first_seen_at")
	KeySucceededAt        = attribute.Key("reconciler.succeeded_at")
	KeyRunID              = attribute.Key("reconciler.run_id")
	KeyMetadataLocalID    = attribute.Key("reconciler.metadata_local_id")
	KeyTenant             = attribute.Key("reconciler.tenant")
	// The GenAI semantic conventions' tool attributes (semconv v1.40:
	// gen_ai.tool.name, gen_ai.tool.call.id), so GenAI views of a trace
	// find the tool call the row belongs to.
	KeyToolName   = attribute.Key("gen_ai.tool.name")
	KeyToolCallID = attribute.Key("gen_ai.tool.call.id")
)

// Attributes of the service's spans beyond §12's list.
const (
	KeyVendor        = attribute.Key("reconciler.vendor")
	KeySource        = attribute.Key("reconciler.source")
	KeyVendorEventID = attribute.Key("reconciler.vendor_event_id")
	KeyEventStatus   = attribute.Key("reconciler.event")
	KeyApprovalID    = attribute.Key("reconciler.approval.id")
	KeyApprovalState = attribute.Key("reconciler.approval.state")
	KeyResult        = attribute.Key("reconciler.result")
	KeyLink          = attribute.Key("reconciler.link")
)

// RowAttributes are the §12 attributes of row (its decision aside: only a
// claim has one). Every one is present on every span about a row, so a
// query on any of them finds every span: an unknown receipt or success
// time is "", and vendor_should_retry is true only when the vendor asked
// for a retry. extra are appended in the same allocation: a span's
// attributes are best set in one call.
func RowAttributes(row ledger.Row, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append(append(make([]attribute.KeyValue, 0, rowAttributes+len(extra)),
		KeyTenant.String(row.Tenant),
		KeyIdempotencyKey.String(row.Key),
		KeyIntentFingerprint.String(row.IntentFingerprint),
		KeyMetadataLocalID.String(row.MetadataLocalID),
		KeyRunID.String(row.RunID),
		KeyToolName.String(row.Tool),
		KeyToolCallID.String(row.ToolCallID),
		KeyVendor.String(row.Vendor),
		KeyStatus.String(string(row.Status)),
		KeyAttempt.Int(row.Attempt),
		KeyUpstreamReceiptID.String(row.UpstreamReceiptID),
		KeyIdempotentReplayed.Bool(row.IdempotentReplayed),
		KeyVendorShouldRetry.Bool(row.VendorShouldRetry != nil && *row.VendorShouldRetry),
		KeyFirstSeenAt.String(timestamp(row.FirstSeenAt)),
		KeySucceededAt.String(timestamp(row.SucceededAt)),
	), extra...)
}

// rowAttributes is how many RowAttributes sets before its extra.
const rowAttributes = 15

// AppendEventAttributes appends to dst the attributes an event carries of
// its row: fewer than RowAttributes, because an event is not the whole
// row. It appends, so a hot path can build a span's attributes in one
// allocation.
func AppendEventAttributes(dst []attribute.KeyValue, ev ledger.Event) []attribute.KeyValue {
	return append(dst,
		KeyTenant.String(ev.Tenant),
		KeyIdempotencyKey.String(ev.Key),
		KeyRunID.String(ev.RunID),
		KeyToolName.String(ev.Tool),
		KeyToolCallID.String(ev.ToolCallID),
		KeyEventStatus.String(ev.Status),
		KeyUpstreamReceiptID.String(ev.ReceiptID),
		KeySource.String(string(ev.Source)),
	)
}

// eventAttributes is how many AppendEventAttributes appends.
const eventAttributes = 8

// EventAttributes are AppendEventAttributes' attributes of ev, with room
// for extra more.
func EventAttributes(ev ledger.Event, extra int) []attribute.KeyValue {
	return AppendEventAttributes(make([]attribute.KeyValue, 0, eventAttributes+extra), ev)
}

// timestamp is t in RFC 3339 with nanoseconds, UTC, or "" when zero.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Annotate sets row's attributes and extra on span and links it to the
// row's claim (LinkClaim). It does nothing to a span that does not
// record, so callers need not check.
func Annotate(span trace.Span, row ledger.Row, extra ...attribute.KeyValue) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(RowAttributes(row, extra...)...)
	LinkClaim(span, row.Traceparent)
}
