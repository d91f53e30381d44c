package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/internal/tracing"
	"github.com/agentledger/reconciler/ledger"
)

// The approval gate's routes (docs/architecture.md §11). A tenant token and an
// approver token read their tenant's approvals; an admin token reads any
// tenant's. Only approver and admin tokens decide, and never the token
// that made the claim (the store refuses it by fingerprint).

// approvalBody is the body of POST /v1/approvals/{id}/approve and /deny.
type approvalBody struct {
	Actor string `json:"actor"`
	Note  string `json:"note,omitempty"`
}

// approvalView is one approval and the row it gates.
type approvalView struct {
	Approval ledger.Approval `json:"approval"`
	Row      ledger.Row      `json:"row"`
}

type approvalsResponse struct {
	Approvals  []approvalView `json:"approvals"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

func newApprovalView(r ledger.Row) approvalView {
	return approvalView{Approval: *r.Approval, Row: present(r)}
}

func (s *Server) approvalRoutes(e *echo.Echo, read, decide, idem echo.MiddlewareFunc) {
	e.GET("/v1/approvals", chain(s.listApprovals, read))
	e.GET("/v1/approvals/:id", chain(s.getApproval, read))
	e.POST("/v1/approvals/:id/approve", chain(func(c echo.Context) error { return s.decideApproval(c, ledger.VerdictGrant) }, decide, idem))
	e.POST("/v1/approvals/:id/deny", chain(func(c echo.Context) error { return s.decideApproval(c, ledger.VerdictDeny) }, decide, idem))
}

// approvalTenant is the tenant the caller acts for on an approval route:
// its own, or "" (any) for an admin token.
func approvalTenant(c echo.Context) string {
	p := principalOf(c)
	if p.role == roleAdmin {
		return ""
	}
	return p.tenant
}

// approvalID reads and checks the path's approval id.
func approvalID(c echo.Context) (string, error) {
	id := c.Param("id")
	if err := ledger.ValidateApprovalID(id); err != nil {
		return "", err
	}
	return id, nil
}

var approvalListParams = map[string]bool{"state": true, "tenant": true, "limit": true, "cursor": true}

// listApprovals is GET /v1/approvals[?state=requested]: the open requests,
// soonest to expire first. An admin token lists every tenant's, or one's
// with ?tenant=.
func (s *Server) listApprovals(c echo.Context) error {
	p := principalOf(c)
	if err := checkQuery(c, approvalListParams); err != nil {
		return err
	}
	q := c.QueryParams()
	if st := q.Get("state"); st != "" && st != string(ledger.ApprovalRequested) {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput,
			"state: only requested approvals are listed; a decided one stays on its row (GET /v1/approvals/{id})")
	}
	aq := ledger.ApprovalQuery{Tenant: approvalTenant(c), Cursor: q.Get("cursor")}
	if t := q.Get("tenant"); t != "" {
		if err := ledger.ValidateTenant(t); err != nil {
			return err
		}
		if p.role != roleAdmin && t != p.tenant {
			return newError(http.StatusForbidden, apierror.CodeForbidden, "a tenant or approver token reads only its own tenant")
		}
		aq.Tenant = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ledger.MaxListLimit {
			return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "limit must be an integer from 1 to "+strconv.Itoa(ledger.MaxListLimit))
		}
		aq.Limit = n
	}
	page, err := s.store.ListApprovals(requestContext(c), aq)
	if err != nil {
		return err
	}
	out := approvalsResponse{Approvals: make([]approvalView, 0, len(page.Rows)), NextCursor: page.NextCursor}
	for _, r := range page.Rows {
		out.Approvals = append(out.Approvals, newApprovalView(r))
	}
	return writeJSON(c, http.StatusOK, out)
}

// getApproval is GET /v1/approvals/{id}: the approval in any state and its
// row. Another tenant's is 404.
func (s *Server) getApproval(c echo.Context) error {
	if err := checkQuery(c, nil); err != nil {
		return err
	}
	id, err := approvalID(c)
	if err != nil {
		return err
	}
	row, err := s.store.GetApproval(requestContext(c), id)
	if err != nil {
		return err
	}
	if t := approvalTenant(c); t != "" && row.Tenant != t {
		return ledger.ErrApprovalNotFound
	}
	return writeJSON(c, http.StatusOK, newApprovalView(row))
}

// decideApproval is POST /v1/approvals/{id}/approve and /deny. A grant lets
// the key's next claim proceed once; a denial makes the row failed_poison.
// Both wake the claims long-polling the row on this server.
func (s *Server) decideApproval(c echo.Context, v ledger.Verdict) error {
	id, err := approvalID(c)
	if err != nil {
		return err
	}
	var b approvalBody
	if err := s.bind(c, &b); err != nil {
		return err
	}
	if strings.TrimSpace(b.Actor) == "" {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "actor is required: say who decides")
	}
	if v == ledger.VerdictDeny && strings.TrimSpace(b.Note) == "" {
		return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "note is required: say why the call is denied")
	}
	p := principalOf(c)
	ctx := requestContext(c)
	row, ch, err := s.store.DecideApproval(ctx, ledger.ApprovalDecision{
		Tenant: approvalTenant(c), ID: id, Verdict: v, Actor: b.Actor, Note: b.Note, By: p.fp, At: s.now(),
	})
	if err != nil {
		return err
	}
	s.watch.signal(row.Tenant, row.Key)
	s.metrics.change(ch, ledger.SourceHuman)
	traceRow(ctx, row, tracing.KeyApprovalID.String(id), tracing.KeyApprovalState.String(string(row.Approval.State)))
	s.log.InfoContext(ctx, "approval decided", append(logAttrs(row.Tenant, row.Key, row.RunID),
		"approval_id", id, "state", row.Approval.State, "actor", b.Actor, "by", p.fp)...)
	return writeJSON(c, http.StatusOK, newApprovalView(row))
}
