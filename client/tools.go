package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// toolBody is the body of PUT /v1/tools/{name}: the entry as registered.
// The tenant comes from the token; the version and times are the store's,
// and the API refuses them in a body.
type toolBody struct {
	Name         string              `json:"name,omitempty"`
	Vendor       string              `json:"vendor"`
	Class        ledger.ToolClass    `json:"class"`
	SideEffect   string              `json:"side_effect,omitempty"`
	KeyPlacement ledger.KeyPlacement `json:"key_placement"`
	IntentFields []string            `json:"intent_fields,omitempty"`
	Checklist    ledger.Checklist    `json:"checklist"`
	Autonomy     ledger.Autonomy     `json:"autonomy,omitempty"`
	Policy       string              `json:"policy,omitempty"`
}

// toolAnswer is the answer of PUT and GET /v1/tools/{name}.
type toolAnswer struct {
	Tool ledger.Tool `json:"tool"`
	// Changed is false when a PUT matched the stored entry.
	Changed bool `json:"changed"`
}

// PutTool registers t in the token's tenant's registry, or replaces the
// entry of its name (docs/architecture.md §11). Tenant, Version and the times of
// t are ignored: the token names the tenant, the store keeps the rest. It
// returns the stored entry and whether the PUT changed it (an identical
// entry keeps its version). A PUT is idempotent, so it is resent on a
// transport failure or a 5xx.
func (c *Client) PutTool(ctx context.Context, t ledger.Tool) (ledger.Tool, bool, error) {
	if err := checkToolName(t.Name); err != nil {
		return ledger.Tool{}, false, fmt.Errorf("register tool: %w", err)
	}
	body := toolBody{
		Name: t.Name, Vendor: t.Vendor, Class: t.Class, SideEffect: t.SideEffect, KeyPlacement: t.KeyPlacement,
		IntentFields: t.IntentFields, Checklist: t.Checklist, Autonomy: t.Autonomy, Policy: t.Policy,
	}
	var out toolAnswer
	if _, err := c.do(ctx, request{method: http.MethodPut, path: toolPath(t.Name), body: body}, true, &out); err != nil {
		return ledger.Tool{}, false, fmt.Errorf("register tool %s: %w", t.Name, err)
	}
	return out.Tool, out.Changed, nil
}

// GetTool returns the registry entry of name (with an admin token, of the
// tenant WithTenant names). ErrNotFound when the tool is not registered.
func (c *Client) GetTool(ctx context.Context, name string) (ledger.Tool, error) {
	if err := checkToolName(name); err != nil {
		return ledger.Tool{}, fmt.Errorf("get tool: %w", err)
	}
	var out toolAnswer
	if _, err := c.do(ctx, request{method: http.MethodGet, path: toolPath(name), query: c.tenantQuery()}, true, &out); err != nil {
		return ledger.Tool{}, fmt.Errorf("get tool %s: %w", name, err)
	}
	return out.Tool, nil
}

// ListTools returns the tenant's registry, by name.
func (c *Client) ListTools(ctx context.Context) ([]ledger.Tool, error) {
	var out struct {
		Tools []ledger.Tool `json:"tools"`
	}
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/tools", query: c.tenantQuery()}, true, &out); err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	return out.Tools, nil
}

// DeleteTool removes the registry entry of name; its claims are then
// served as any unregistered tool's. ErrNotFound when it is not
// registered (also when a resent DELETE finds the first one's work done).
func (c *Client) DeleteTool(ctx context.Context, name string) error {
	if err := checkToolName(name); err != nil {
		return fmt.Errorf("unregister tool: %w", err)
	}
	if _, err := c.do(ctx, request{method: http.MethodDelete, path: toolPath(name)}, true, nil); err != nil {
		return fmt.Errorf("unregister tool %s: %w", name, err)
	}
	return nil
}

// tenantQuery is ?tenant= for an admin token's reads.
func (c *Client) tenantQuery() url.Values {
	if c.tenant == "" {
		return nil
	}
	return url.Values{"tenant": {c.tenant}}
}

// toolPath is the path of a registry entry. A tool name is [A-Za-z0-9_.-]
// (the API reads the raw segment), so escaping only keeps a name that is
// not one from changing the path.
func toolPath(name string) string { return "/v1/tools/" + url.PathEscape(name) }

// checkToolName refuses a name no entry can have before a request is sent.
func checkToolName(name string) error {
	if name == "" || strings.Trim(name, ".") == "" {
		return fmt.Errorf("%w: tool name %q", ErrInvalidInput, name)
	}
	return nil
}
