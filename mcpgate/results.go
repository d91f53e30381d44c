package mcpgate

import (
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// The gate's own results: one text block the model reads, and the same
// facts in _meta (reconciler/decision, …) for a harness. They never carry
// structuredContent, which a client may check against the upstream tool's
// output schema.

// notice is a result of the gate's own.
func notice(isError bool, text string, meta mcp.Meta) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: isError, Meta: meta}
}

// rowMeta is the row's place in _meta.
func rowMeta(decision ledger.Decision, code string, row *ledger.Row) mcp.Meta {
	m := mcp.Meta{MetaDecision: string(decision)}
	if code != "" {
		m[MetaCode] = code
	}
	if row != nil {
		m[MetaKey], m[MetaStatus], m[MetaLocalID] = row.Key, string(row.Status), row.MetadataLocalID
	}
	return m
}

func keyOf(row *ledger.Row) string {
	if row == nil {
		return "none"
	}
	return row.Key
}

// refusal is a call the gate refused before asking the ledger.
func refusal(code, text string) *mcp.CallToolResult {
	return notice(true, text, mcp.Meta{MetaError: code})
}

// ledgerFailure is a call that stopped because the ledger could not be
// asked, or answered what the gate cannot read: nothing went upstream. Its
// _meta names the API's error code, or ledger_unavailable.
func ledgerFailure(err error, what string) *mcp.CallToolResult {
	code := "ledger_unavailable"
	var ae *client.Error
	if errors.As(err, &ae) {
		code = ae.Code
	}
	return notice(true, fmt.Sprintf("The gate could not %s with the reconciler ledger (%v), so nothing was sent upstream. "+
		"Try the same call again later.", what, err), mcp.Meta{MetaError: code})
}

// replayed answers a call whose intent succeeded (or failed) before: the
// stored result, else a note that the side effect is done.
func replayed(row ledger.Row) *mcp.CallToolResult {
	if row.Result != "" {
		if r, err := decodeResult(row.Result); err == nil {
			return r
		}
	}
	if row.Status == ledger.StatusFailedPoison {
		return stopped(ledger.CodeFailedPoison, &row)
	}
	text := fmt.Sprintf("Already done: this call succeeded before (key %s", row.Key)
	if row.UpstreamReceiptID != "" {
		text += ", receipt " + row.UpstreamReceiptID
	}
	text += ") and was not sent again. Its result is not kept: it was larger than 64 KiB, or the vendor's webhook, " +
		"the resolver or a human settled the call."
	return notice(false, text, rowMeta(ledger.DecisionReplay, "", &row))
}

// stopped answers a stop: a failure kept with its result returns it, as a
// repeated call of a refused intent should get the same refusal.
func stopped(code string, row *ledger.Row) *mcp.CallToolResult {
	if code == ledger.CodeFailedPoison && row != nil && row.Result != "" {
		if r, err := decodeResult(row.Result); err == nil {
			return r
		}
	}
	var why string
	switch code {
	case ledger.CodeToolFrozen:
		why = "the tool is frozen by the kill switch"
	case ledger.CodeFailedPoison:
		why = "this call failed before and is not sent again; a different request needs different arguments"
	default:
		why = "the ledger stopped it"
	}
	return notice(true, fmt.Sprintf("Stopped (%s): %s. Nothing was sent (key %s).", code, why, keyOf(row)),
		rowMeta(ledger.DecisionStop, code, row))
}

// waiting answers a call whose key is in flight elsewhere or not settled.
func waiting(row *ledger.Row) *mcp.CallToolResult {
	status := "unknown"
	if row != nil {
		status = string(row.Status)
	}
	return notice(true, fmt.Sprintf("Not sent: the same call (key %s) is in flight, or its outcome is not known yet "+
		"(status %s). Ask again later with the same arguments; do not change them to get around this. The ledger "+
		"settles it from the vendor's webhook, the resolver or a human.", keyOf(row), status),
		rowMeta(ledger.DecisionWait, "", row))
}

// awaitingApproval answers a call that waits for a human's grant.
func awaitingApproval(row *ledger.Row) *mcp.CallToolResult {
	return notice(false, fmt.Sprintf("Waiting for a human's approval (key %s): nothing was sent. Make the same "+
		"call again once it is approved; a denial stops it.", keyOf(row)),
		rowMeta(ledger.DecisionAwaitApproval, "", row))
}

// queued answers a call the runtime's outbox worker will make.
func queued(row *ledger.Row) *mcp.CallToolResult {
	return notice(false, fmt.Sprintf("Queued (key %s): the runtime's outbox worker makes this call; nothing was "+
		"sent from here. Making the same call again does not queue it twice.", keyOf(row)),
		rowMeta(ledger.DecisionQueued, "", row))
}

// unknownOutcome answers a call that may or may not have happened.
func unknownOutcome(decision ledger.Decision, row ledger.Row, kind ledger.OutcomeKind, timeout time.Duration, answer *mcp.CallToolResult) *mcp.CallToolResult {
	var what string
	switch kind {
	case ledger.OutcomeTimeout:
		what = "The upstream call got no answer within " + timeout.String()
	case ledger.OutcomeNetworkError:
		what = "The upstream call lost its connection"
	default:
		what = "The upstream MCP server failed the call"
	}
	r := notice(true, fmt.Sprintf("%s; it may have happened. The ledger holds it as unknown (key %s) until the "+
		"vendor's webhook, the resolver or a human settles it. Do not retry with changed arguments: the same "+
		"arguments keep the same key.", what, row.Key), rowMeta(decision, "", &row))
	if answer != nil {
		r.Content = append(r.Content, answer.Content...)
	}
	return r
}

// unrecorded answers a call that was made but whose outcome the ledger
// did not take: the row stays pending under its lease, then the resolver
// or a retry with the same key settles it. The upstream's answer follows
// the note, so the model knows what was said, but it is never presented
// as a settled success.
func unrecorded(decision ledger.Decision, row ledger.Row, err error, answer *mcp.CallToolResult) *mcp.CallToolResult {
	r := notice(true, fmt.Sprintf("The upstream call was made, but the reconciler ledger did not record its outcome "+
		"(%v). The call stays pending (key %s) until the resolver or a retry with the same arguments settles it; "+
		"do not retry with changed arguments.", err, row.Key), rowMeta(decision, "", &row))
	r.Meta[MetaError] = "report_failed"
	if answer != nil {
		r.Content = append(r.Content, answer.Content...)
	}
	return r
}
