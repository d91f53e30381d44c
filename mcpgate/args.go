package mcpgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// The _meta keys the gate reads from a call and writes to an upstream call
// and to its own results. They are namespaced as MCP asks of _meta keys.
const (
	// MetaRunID (read) names the call's run; default Options.RunID.
	MetaRunID = "reconciler/run_id"
	// MetaToolCallID (read) is the agent's id of the call, kept on the row.
	MetaToolCallID = "reconciler/tool_call_id"
	// MetaKey (written) is the row's idempotency key.
	MetaKey = "reconciler/idempotency_key"
	// MetaVendorKey (written) is the row's vendor_key: the key the
	// upstream sends to the vendor (the key argument carries it too).
	MetaVendorKey = "reconciler/vendor_key"
	// MetaLocalID (written) is the row's metadata_local_id: an upstream that
	// writes it into the vendor's metadata lets a webhook settle the row.
	MetaLocalID = "reconciler/metadata_local_id"
	// MetaDecision, MetaCode, MetaStatus and MetaError (written to the
	// gate's own results) say what the ledger decided, why it stopped,
	// where the row stands, and which failure kept the call from upstream.
	MetaDecision = "reconciler/decision"
	MetaCode     = "reconciler/code"
	MetaStatus   = "reconciler/status"
	MetaError    = "reconciler/error"
)

// metaPrefix is the gate's namespace: a client's own values under it are
// not passed upstream, where they would pose as the gate's.
const metaPrefix = "reconciler/"

// perHop reports whether a _meta key belongs to one MCP connection, not to
// the call: the protocol's reserved keys (the protocol version, client and
// server info the SDK adds on each hop, which the upstream checks against
// its own connection) and the progress token (progress is not relayed).
func perHop(k string) bool {
	return strings.HasPrefix(k, "io.modelcontextprotocol/") || k == "progressToken"
}

// scrubberFor removes the default key-like fields and the registry's key
// argument (which may be any name, client_ref say) from a tool's arguments
// and schema.
func scrubberFor(t ledger.Tool) *client.Scrubber {
	fields := client.DefaultScrubFields
	if a := t.KeyPlacement.Argument; a != "" {
		fields = append(fields[:len(fields):len(fields)], a)
	}
	return client.NewScrubber(fields...)
}

// decodeArgs reads a call's arguments: a JSON object or nothing. Numbers
// keep their text (json.Number), so an amount the model wrote is the
// amount upstream gets and the intent fingerprints.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil || args == nil {
		return nil, errors.New("arguments must be a JSON object")
	}
	if dec.More() {
		return nil, errors.New("arguments must be one JSON object")
	}
	return args, nil
}

// intentOf is the side effect's identity: the registry's intent_fields of
// the (scrubbed) arguments, or every one of them.
func intentOf(t ledger.Tool, args map[string]any) map[string]any {
	if len(t.IntentFields) == 0 {
		return args
	}
	intent := make(map[string]any, len(t.IntentFields))
	for _, f := range t.IntentFields {
		if v, ok := args[f]; ok {
			intent[f] = v
		}
	}
	return intent
}

// keyArgument is the argument that carries the key upstream: "" for a
// tool that takes none. Only arguments can carry it over MCP; a placement
// meant for HTTP (a header, a body field) is a registry mistake for this
// tool, refused before anything is claimed.
func keyArgument(t ledger.Tool) (string, error) {
	k := t.KeyPlacement
	switch {
	case k.Argument != "":
		return k.Argument, nil
	case k.None:
		return "", nil
	}
	var where string
	switch {
	case k.Header != "":
		where = "header " + k.Header
	case k.BodyField != "":
		where = "body_field " + k.BodyField
	case k.ExternalIDField != "":
		where = "external_id_field " + k.ExternalIDField
	default:
		where = "nothing"
	}
	return "", fmt.Errorf("the registry places %s's key in %s; through the MCP gate a key travels in an argument "+
		"(key_placement: {argument: NAME}), or not at all ({none: true})", t.Name, where)
}

// runOf returns the call's run_id and tool_call_id from its _meta.
func (g *Gate) runOf(meta mcp.Meta) (runID, callID string, err error) {
	runID = g.runID
	if v, ok := meta[MetaRunID]; ok {
		s, isString := v.(string)
		if !isString || ledger.ValidateRunID(s) != nil {
			return "", "", fmt.Errorf("_meta[%q] must be 1-128 of [A-Za-z0-9_-]", MetaRunID)
		}
		runID = s
	}
	if v, ok := meta[MetaToolCallID]; ok {
		s, isString := v.(string)
		if !isString || len(s) > 255 || strings.IndexFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
			return "", "", fmt.Errorf("_meta[%q] must be at most 255 printable ASCII characters", MetaToolCallID)
		}
		callID = s
	}
	return runID, callID, nil
}

// hopMeta is the _meta of a call passed through unclaimed: the client's,
// without the per-hop keys.
func hopMeta(meta mcp.Meta) mcp.Meta {
	out := mcp.Meta{}
	for k, v := range meta {
		if !perHop(k) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// upstreamMeta is the _meta sent upstream with a write: the client's, without the
// gate's namespace and the per-hop keys, plus extra.
func upstreamMeta(meta mcp.Meta, extra map[string]any) mcp.Meta {
	out := mcp.Meta{}
	for k, v := range meta {
		if !strings.HasPrefix(k, metaPrefix) && !perHop(k) {
			out[k] = v
		}
	}
	maps.Copy(out, extra)
	if len(out) == 0 {
		return nil
	}
	return out
}
