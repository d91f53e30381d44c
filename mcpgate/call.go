package mcpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// The HTTP statuses an MCP answer is reported as, so the ledger's one
// classification (docs/architecture.md §4) reads it: a result is a 2xx; a
// result the tool marked as an error, or a call the upstream refused as
// malformed, is a 4xx (the tool did not do it: failed_poison); any other
// protocol error is a 5xx (it may have happened: unknown).
const (
	statusResult  = 200
	statusRefused = 422
	statusInvalid = 400
	statusFailed  = 502
)

// handler serves tools/call of one upstream tool.
func (g *Gate) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.call(ctx, name, req.Params)
	}
}

// call routes one tools/call: a registered read goes upstream untouched; an
// unregistered tool goes upstream with key-like arguments removed (or is
// refused when strict); a registered write goes through the ledger. When
// the registry cannot be read, nothing goes upstream.
func (g *Gate) call(ctx context.Context, name string, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	args, err := decodeArgs(p.Arguments)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	t, err := g.ledger.GetTool(ctx, name)
	registered := err == nil
	switch {
	case errors.Is(err, client.ErrNotFound):
	case err != nil:
		g.log.WarnContext(ctx, "mcp gate: tool registry not readable; nothing sent", "tool", name, "err", err)
		return ledgerFailure(err, "read the tool registry"), nil
	}
	switch {
	case registered && t.Class == ledger.ClassRead:
		return g.forward(ctx, name, p.Arguments, hopMeta(p.Meta))
	case !registered && g.strict:
		return refusal("unregistered_tool", fmt.Sprintf(
			"%s is not in the tool registry, and this gate passes registered tools only. Nothing was sent.", name)), nil
	case !registered:
		return g.forward(ctx, name, scrubberFor(ledger.Tool{}).Scrub(args), hopMeta(p.Meta))
	}
	return g.write(ctx, t, args, p.Meta), nil
}

// forward passes a call upstream unclaimed. The upstream's protocol errors
// come back as they are; a call that got no answer is an error result.
func (g *Gate) forward(ctx context.Context, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	cctx, cancel := context.WithTimeout(ctx, g.callTimeout)
	defer cancel()
	res, err := g.upstream.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	var werr *jsonrpc.Error
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &werr):
		return nil, werr
	}
	g.log.WarnContext(ctx, "mcp gate: upstream did not answer", "tool", name, "err", err)
	return notice(true, fmt.Sprintf("The upstream MCP server did not answer %s: %v.", name, err),
		mcp.Meta{MetaError: "upstream_unavailable"}), nil
}

// write runs one call of a registered write tool under the ledger.
func (g *Gate) write(ctx context.Context, t ledger.Tool, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
	keyArg, err := keyArgument(t)
	if err != nil {
		return refusal("key_placement", err.Error()+" Nothing was sent.")
	}
	runID, callID, err := g.runOf(meta)
	if err != nil {
		return refusal("invalid_meta", err.Error()+". Nothing was sent.")
	}
	clean := scrubberFor(t).Scrub(args)
	resp, err := g.ledger.Claim(ctx, client.ClaimRequest{
		RunID: runID, Tool: t.Name, ToolCallID: callID, Vendor: t.Vendor, ToolClass: t.Class,
		Intent: intentOf(t, clean),
	})
	if err != nil {
		g.log.WarnContext(ctx, "mcp gate: claim failed; nothing sent", "tool", t.Name, "run_id", runID, "err", err)
		return ledgerFailure(err, "claim the call")
	}
	row := resp.Row
	key := resp.Key()
	g.log.InfoContext(ctx, "mcp gate: claim decided", "tool", t.Name, "run_id", runID, "key", key, "decision", resp.Decision)
	switch resp.Decision {
	case ledger.DecisionProceed, ledger.DecisionRetrySameKey:
		if row == nil {
			return ledgerFailure(errors.New("a "+string(resp.Decision)+" without a row"), "claim the call")
		}
		return g.attempt(ctx, resp.Decision, t, *row, keyArg, clean, meta)
	case ledger.DecisionReplay:
		if row == nil {
			return ledgerFailure(errors.New("a replay without a row"), "claim the call")
		}
		return replayed(*row)
	case ledger.DecisionStop:
		return stopped(resp.Code, row)
	case ledger.DecisionWait:
		return waiting(row)
	case ledger.DecisionAwaitApproval:
		return awaitingApproval(row)
	case ledger.DecisionQueued:
		return queued(row)
	}
	return ledgerFailure(fmt.Errorf("unknown decision %q", resp.Decision), "claim the call")
}

// attempt makes the upstream call with the row's key and reports it.
func (g *Gate) attempt(ctx context.Context, decision ledger.Decision, t ledger.Tool, row ledger.Row, keyArg string, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
	send := make(map[string]any, len(args)+1)
	for k, v := range args {
		send[k] = v
	}
	if keyArg != "" {
		// The vendor's key: the row's vendor_key (the ledger key unless
		// the vendor's profile derives a shorter or other-shaped one).
		send[keyArg] = row.WireKey()
	}
	params := &mcp.CallToolParams{Name: t.Name, Arguments: send,
		Meta: upstreamMeta(meta, map[string]any{MetaKey: row.Key, MetaVendorKey: row.WireKey(), MetaLocalID: row.MetadataLocalID})}
	cctx, cancel := context.WithTimeout(ctx, g.callTimeout)
	res, callErr := g.upstream.CallTool(cctx, params)
	cancel()

	rep, answer := outcomeOf(res, callErr)
	rep.Attempt = row.Attempt
	if rep.Kind != ledger.OutcomeResponse {
		g.log.WarnContext(ctx, "mcp gate: upstream write got no answer", "tool", t.Name, "key", row.Key, "kind", rep.Kind, "err", callErr)
	}
	// The report outlives the caller: a call that used the caller's time
	// up is exactly the one whose outcome must reach the ledger.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), g.reportTimeout)
	settled, err := g.ledger.ReportOutcome(rctx, row.Key, rep)
	rcancel()
	if err != nil {
		g.log.ErrorContext(ctx, "mcp gate: outcome not recorded", "tool", t.Name, "key", row.Key, "err", err)
		return unrecorded(decision, row, err, answer)
	}
	switch settled.Status {
	case ledger.StatusSucceeded, ledger.StatusFailedPoison:
		if answer != nil {
			return answer
		}
		return replayed(settled)
	case ledger.StatusUnknown:
		return unknownOutcome(decision, settled, rep.Kind, g.callTimeout, answer)
	}
	return waiting(&settled)
}

// outcomeOf classifies an upstream answer as the report the ledger reads,
// and returns the answer to hand the client, decoded from the very text
// the report stores, so a later replay returns the same result.
func outcomeOf(res *mcp.CallToolResult, err error) (client.OutcomeReport, *mcp.CallToolResult) {
	var werr *jsonrpc.Error
	switch {
	case err == nil && res != nil:
		status := statusResult
		if res.IsError {
			status = statusRefused
		}
		return response(status, res)
	case err != nil && errors.As(err, &werr):
		// The upstream answered, with a protocol error.
		status := statusFailed
		switch werr.Code {
		case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidRequest:
			status = statusInvalid
		}
		return response(status, notice(true, "The upstream MCP server refused the call: "+werr.Message, nil))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return client.OutcomeReport{Kind: ledger.OutcomeTimeout}, nil
	}
	return client.OutcomeReport{Kind: ledger.OutcomeNetworkError}, nil
}

// response is a response report of res, with res kept as the result when
// it fits the ledger's cap. The upstream connection's _meta (its server
// info) is not the result's: a replay through another gate must not claim
// to come from this upstream session.
func response(status int, res *mcp.CallToolResult) (client.OutcomeReport, *mcp.CallToolResult) {
	rep := client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: status}
	if len(res.Meta) > 0 {
		kept := *res
		kept.Meta = mcp.Meta{}
		for k, v := range res.Meta {
			if !perHop(k) {
				kept.Meta[k] = v
			}
		}
		if len(kept.Meta) == 0 {
			kept.Meta = nil
		}
		res = &kept
	}
	text, err := json.Marshal(res)
	if err != nil {
		return rep, res
	}
	if len(text) <= ledger.MaxResultLen {
		rep.Result = string(text)
	}
	out, err := decodeResult(string(text))
	if err != nil {
		return rep, res
	}
	return rep, out
}

// decodeResult reads a stored result.
func decodeResult(text string) (*mcp.CallToolResult, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return nil, fmt.Errorf("stored result: %w", err)
	}
	return &r, nil
}
