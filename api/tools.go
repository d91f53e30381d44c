package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// Registry is the tool registry (docs/architecture.md §11) as the API uses it;
// registry.Cache implements it. Put and Delete must be durable and in
// effect on this replica when they return; Lookup and Decide are asked on
// every claim, so they must answer from memory (Decide runs the tool's
// compiled policy). Get and List read the store.
type Registry interface {
	Put(ctx context.Context, t ledger.Tool) (ledger.Tool, bool, error)
	Delete(ctx context.Context, tenant, name string) error
	Get(ctx context.Context, tenant, name string) (ledger.Tool, error)
	List(ctx context.Context, tenant string) ([]ledger.Tool, error)
	Lookup(tenant, name string) (ledger.Tool, bool)
	// Decide is the autonomy of one claim of t, and why it is approval
	// (the effective autonomy, then the policy, failing closed).
	Decide(ctx context.Context, t ledger.Tool, runID string, intent json.RawMessage) (ledger.Autonomy, string)
}

// toolBody is the body of PUT /v1/tools/{name}: the registry file's entry
// in its JSON form. The tenant comes from the token; the version and times
// are the store's.
type toolBody struct {
	// Name may repeat the path's name (a registry file's entries carry it).
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

type toolResponse struct {
	Tool ledger.Tool `json:"tool"`
	// Changed is false when the PUT matched the stored entry.
	Changed bool `json:"changed"`
}

type toolGetResponse struct {
	Tool ledger.Tool `json:"tool"`
}

type toolsResponse struct {
	Tools []ledger.Tool `json:"tools"`
}

var errNoRegistry = newError(http.StatusNotImplemented, apierror.CodeNotImplemented, "the tool registry is not configured on this server")

// toolRoutes registers the registry's routes: a tenant manages its own
// tools; an admin token may read a tenant's (?tenant=).
func (s *Server) toolRoutes(e *echo.Echo, tenantOnly, anyRole echo.MiddlewareFunc) {
	e.GET("/v1/tools", chain(s.listTools, anyRole))
	e.GET("/v1/tools/:name", chain(s.getTool, anyRole))
	e.PUT("/v1/tools/:name", chain(s.putTool, tenantOnly))
	e.DELETE("/v1/tools/:name", chain(s.deleteTool, tenantOnly))
}

// toolName reads and checks the path's tool name. Tool names have no '%',
// so the raw path segment is the value.
func toolName(c echo.Context, tenant string) (string, error) {
	name := c.Param("name")
	if err := ledger.ValidateToolID(tenant, name); err != nil {
		return "", err
	}
	return name, nil
}

// putTool is PUT /v1/tools/{name}: register a tool or replace its entry.
// 201 for a new entry, 200 for a replaced or unchanged one.
func (s *Server) putTool(c echo.Context) error {
	if s.registry == nil {
		return errNoRegistry
	}
	tenant := principalOf(c).tenant
	name, err := toolName(c, tenant)
	if err != nil {
		return err
	}
	var b toolBody
	if err := s.bind(c, &b); err != nil {
		return err
	}
	if b.Name != "" && b.Name != name {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "the body's name "+quoteField(b.Name)+" is not the path's "+quoteField(name))
	}
	t := ledger.Tool{
		Tenant: tenant, Name: name, Vendor: b.Vendor, Class: b.Class, SideEffect: b.SideEffect,
		KeyPlacement: b.KeyPlacement, IntentFields: b.IntentFields, Checklist: b.Checklist,
		Autonomy: b.Autonomy, Policy: b.Policy,
		// Microseconds: what every store keeps, so the answer and a later GET agree.
		UpdatedAt: s.now().UTC().Truncate(time.Microsecond),
	}
	if err := t.Validate(); err != nil {
		return err
	}
	ctx := requestContext(c)
	stored, changed, err := s.registry.Put(ctx, t)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if changed && stored.Version == 1 {
		status = http.StatusCreated
	}
	if changed {
		eff, reason := stored.EffectiveAutonomy()
		s.log.InfoContext(ctx, "tool registered", "tenant", tenant, "tool", name, "version", stored.Version,
			"class", stored.Class, "autonomy", stored.Autonomy, "effective_autonomy", eff, "reason", reason)
	}
	return writeJSON(c, status, toolResponse{Tool: stored, Changed: changed})
}

// getTool is GET /v1/tools/{name}.
func (s *Server) getTool(c echo.Context) error {
	if s.registry == nil {
		return errNoRegistry
	}
	tenant, err := tenantFor(c)
	if err != nil {
		return err
	}
	name, err := toolName(c, tenant)
	if err != nil {
		return err
	}
	t, err := s.registry.Get(requestContext(c), tenant, name)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, toolGetResponse{Tool: t})
}

// listTools is GET /v1/tools: the tenant's entries, by name.
func (s *Server) listTools(c echo.Context) error {
	if s.registry == nil {
		return errNoRegistry
	}
	tenant, err := tenantFor(c)
	if err != nil {
		return err
	}
	list, err := s.registry.List(requestContext(c), tenant)
	if err != nil {
		return err
	}
	if list == nil {
		list = []ledger.Tool{}
	}
	return writeJSON(c, http.StatusOK, toolsResponse{Tools: list})
}

// deleteTool is DELETE /v1/tools/{name}: 204, or 404 when not registered.
// Claims of the tool are then served as any unregistered tool's.
func (s *Server) deleteTool(c echo.Context) error {
	if s.registry == nil {
		return errNoRegistry
	}
	tenant := principalOf(c).tenant
	name, err := toolName(c, tenant)
	if err != nil {
		return err
	}
	ctx := requestContext(c)
	if err := s.registry.Delete(ctx, tenant, name); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "tool unregistered", "tenant", tenant, "tool", name)
	return c.NoContent(http.StatusNoContent)
}

// gate applies the registry to a claim: a registered tool must be claimed
// with its vendor and class (422 tool_mismatch), and its entry and policy
// decide the claim's gate; an unregistered one is autonomous, as before,
// unless the registry is strict (422 unregistered_tool). The gate records
// the claiming token's fingerprint, so that token cannot approve.
func (s *Server) gate(c echo.Context, b claimBody) (ledger.Gate, error) {
	if s.registry == nil {
		return ledger.Gate{}, nil
	}
	p := principalOf(c)
	t, ok := s.registry.Lookup(p.tenant, b.Tool)
	if !ok {
		if s.strict {
			return ledger.Gate{}, newError(http.StatusUnprocessableEntity, apierror.CodeUnregisteredTool,
				"tool "+quoteField(b.Tool)+" is not registered, and this server serves registered tools only")
		}
		return ledger.Gate{}, nil
	}
	if err := t.Check(b.Vendor, b.ToolClass); err != nil {
		return ledger.Gate{}, err
	}
	autonomy, reason := s.registry.Decide(requestContext(c), t, b.RunID, b.Intent)
	return ledger.Gate{Autonomy: autonomy, Reason: reason, ApprovalTTL: s.approvalTTL, RequestedBy: p.fp}, nil
}
