package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/internal/promreg"
	"github.com/agentledger/reconciler/ledger"
)

// KillSwitch is the kill switch (docs/architecture.md §4, §5) as the API uses it;
// freeze.Cache implements it. The admin routes change it through Put and
// Delete, which must be durable and in effect on this replica when they
// return; claims ask Frozen, and /metrics reads Snapshot, on every call, so
// both must answer from memory. Load reads the store (GET lists what the
// store holds, not what this replica last loaded).
type KillSwitch interface {
	Put(ctx context.Context, f ledger.Freeze) error
	Delete(ctx context.Context, tenant, target string) error
	Load(ctx context.Context) ([]ledger.Freeze, error)
	Snapshot() []ledger.Freeze
	Frozen(tenant, tool string, class ledger.ToolClass) bool
}

// freezeBody is the body of PUT /v1/admin/freezes/{tenant}/{target}.
type freezeBody struct {
	Note  string `json:"note"`
	Actor string `json:"actor,omitempty"`
}

type freezeResponse struct {
	Freeze ledger.Freeze `json:"freeze"`
}

type freezesResponse struct {
	Freezes []ledger.Freeze `json:"freezes"`
}

// useKillSwitch wires o.KillSwitch: claims read its Frozen, unless the
// options set a Frozen func of their own, which would make the routes
// change one switch while claims read another — refused.
func (s *Server) useKillSwitch(o Options) error {
	if o.KillSwitch == nil {
		return nil
	}
	if o.Frozen != nil {
		return errors.New("set KillSwitch or Frozen, not both")
	}
	s.kill, s.frozen = o.KillSwitch, o.KillSwitch.Frozen
	s.tenants = make(map[string]bool, len(o.Tokens))
	for _, tenant := range o.Tokens {
		s.tenants[tenant] = true
	}
	return nil
}

// registerFrozen adds reconciler_frozen to the registry when there is a
// kill switch to report.
func (s *Server) registerFrozen(reg prometheus.Registerer) error {
	if s.kill == nil {
		return nil
	}
	_, err := promreg.Register(reg, &frozenCollector{ks: s.kill})
	return err
}

// freezeRoutes registers the admin routes of the kill switch.
func (s *Server) freezeRoutes(e *echo.Echo, adminOnly, idem echo.MiddlewareFunc) {
	e.GET("/v1/admin/freezes", chain(s.listFreezes, adminOnly))
	e.PUT("/v1/admin/freezes/:tenant/:target", chain(s.putFreeze, adminOnly, idem))
	e.DELETE("/v1/admin/freezes/:tenant/:target", chain(s.deleteFreeze, adminOnly, idem))
}

var errNoKillSwitch = newError(http.StatusNotImplemented, apierror.CodeNotImplemented, "the kill switch is not configured on this server")

// freezeID reads and checks the path's tenant and target. Both are
// identifiers without '%', so the raw path segment is the value.
func freezeID(c echo.Context) (tenant, target string, err error) {
	tenant, target = c.Param("tenant"), c.Param("target")
	if err := ledger.ValidateFreezeID(tenant, target); err != nil {
		return "", "", err
	}
	return tenant, target, nil
}

// putFreeze is PUT /v1/admin/freezes/{tenant}/{target}: freeze a tool or a
// tool class for a tenant. It answers once the freeze is durable and claims
// on this replica stop; other replicas follow within their refresh interval.
func (s *Server) putFreeze(c echo.Context) error {
	if s.kill == nil {
		return errNoKillSwitch
	}
	tenant, target, err := freezeID(c)
	if err != nil {
		return err
	}
	if !s.tenants[tenant] {
		// A typo must not look like a working kill switch: a tenant with no
		// token makes no claims, so freezing it would stop nothing.
		return newError(http.StatusNotFound, apierror.CodeNotFound, "no such tenant: no token of this server belongs to it")
	}
	var b freezeBody
	if err := s.bind(c, &b); err != nil {
		return err
	}
	if b.Actor == "" {
		b.Actor = DefaultActor
	}
	// Microseconds: what every store keeps (PostgreSQL's timestamptz), so the
	// answer and a later GET agree.
	f := ledger.Freeze{Tenant: tenant, Target: target, Actor: b.Actor, Note: b.Note, At: s.now().UTC().Truncate(time.Microsecond)}
	if err := f.Validate(); err != nil {
		return err
	}
	ctx := requestContext(c)
	if err := s.kill.Put(ctx, f); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "kill switch: frozen", "tenant", tenant, "target", target, "actor", f.Actor, "class", f.TargetIsClass())
	return writeJSON(c, http.StatusOK, freezeResponse{Freeze: f})
}

// deleteFreeze is DELETE /v1/admin/freezes/{tenant}/{target}: idempotent,
// 204 whether or not the target was frozen. Unknown tenants are allowed, so
// an entry left by a removed tenant can be cleared.
func (s *Server) deleteFreeze(c echo.Context) error {
	if s.kill == nil {
		return errNoKillSwitch
	}
	tenant, target, err := freezeID(c)
	if err != nil {
		return err
	}
	ctx := requestContext(c)
	if err := s.kill.Delete(ctx, tenant, target); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "kill switch: unfrozen", "tenant", tenant, "target", target)
	return c.NoContent(http.StatusNoContent)
}

// listFreezes is GET /v1/admin/freezes[?tenant=]: every freeze the store
// holds, by tenant and target. Reading it also refreshes this replica.
func (s *Server) listFreezes(c echo.Context) error {
	if s.kill == nil {
		return errNoKillSwitch
	}
	tenant := c.QueryParam("tenant")
	if tenant != "" {
		if err := ledger.ValidateTenant(tenant); err != nil {
			return err
		}
	}
	all, err := s.kill.Load(requestContext(c))
	if err != nil {
		return err
	}
	out := make([]ledger.Freeze, 0, len(all))
	for _, f := range all {
		if tenant == "" || f.Tenant == tenant {
			out = append(out, f)
		}
	}
	return writeJSON(c, http.StatusOK, freezesResponse{Freezes: out})
}

// frozenDesc is reconciler_frozen: one series per frozen tenant and target,
// 1 while frozen and absent once thawed.
var frozenDesc = prometheus.NewDesc("reconciler_frozen",
	"Kill switch: 1 for each tool or tool class frozen for a tenant, as this replica last loaded it.",
	[]string{"tenant", "target"}, nil)

// frozenCollector reads the kill switch's snapshot at every scrape, so a
// series disappears with its freeze whichever replica removed it.
type frozenCollector struct{ ks KillSwitch }

func (c *frozenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- frozenDesc }

func (c *frozenCollector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range c.ks.Snapshot() {
		ch <- prometheus.MustNewConstMetric(frozenDesc, prometheus.GaugeValue, 1, f.Tenant, f.Target)
	}
}
