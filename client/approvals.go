package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentledger/reconciler/ledger"
)

// ApprovalView is one approval request and the row it gates, as the
// approval routes answer it.
type ApprovalView struct {
	Approval ledger.Approval `json:"approval"`
	Row      ledger.Row      `json:"row"`
}

// ApprovalPage is a page of open approval requests, soonest to expire first.
type ApprovalPage struct {
	Approvals  []ApprovalView `json:"approvals"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// ApprovalQuery pages GET /v1/approvals (the open requests). With an admin
// token, WithTenant names the tenant; without it every tenant's are listed.
type ApprovalQuery struct {
	Limit  int
	Cursor string
}

// ApprovalDecision is the body of an approve or a deny: who decides
// (required) and why (required to deny).
type ApprovalDecision struct {
	Actor string `json:"actor"`
	Note  string `json:"note,omitempty"`
}

// ListApprovals returns a page of the open approval requests the token may
// read (a tenant or approver token: its tenant's; an admin token: every
// tenant's, or WithTenant's).
func (c *Client) ListApprovals(ctx context.Context, q ApprovalQuery) (ApprovalPage, error) {
	v := url.Values{"state": {string(ledger.ApprovalRequested)}}
	if c.tenant != "" {
		v.Set("tenant", c.tenant)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	var out ApprovalPage
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/approvals", query: v}, true, &out); err != nil {
		return ApprovalPage{}, fmt.Errorf("list approvals: %w", err)
	}
	return out, nil
}

// GetApproval returns the approval id in any state, and its row.
// ErrNotFound when there is none for the token's tenant.
func (c *Client) GetApproval(ctx context.Context, id string) (ApprovalView, error) {
	if err := ledger.ValidateApprovalID(id); err != nil {
		return ApprovalView{}, fmt.Errorf("get approval: %w: %w", ErrInvalidInput, err)
	}
	var out ApprovalView
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/approvals/" + id}, true, &out); err != nil {
		return ApprovalView{}, fmt.Errorf("get approval %s: %w", id, err)
	}
	return out, nil
}

// Approve grants approval id (an approver token of its tenant, or an admin
// token; never the token that made the claim: ErrForbidden): the key's
// next claim proceeds, once. ErrApprovalDecided when it was decided
// before, ErrApprovalExpired when its time ran out.
//
// A decision is sent once, not resent on a transport failure: a resent
// grant whose first answer was lost would answer approval_decided. After
// an error that is not the API's, read the approval (GetApproval).
func (c *Client) Approve(ctx context.Context, id string, d ApprovalDecision) (ApprovalView, error) {
	return c.decide(ctx, id, "approve", d)
}

// Deny denies approval id (a note is required): the row becomes
// failed_poison and the key's claims stop with code approval_denied.
// Otherwise as Approve.
func (c *Client) Deny(ctx context.Context, id string, d ApprovalDecision) (ApprovalView, error) {
	return c.decide(ctx, id, "deny", d)
}

func (c *Client) decide(ctx context.Context, id, verb string, d ApprovalDecision) (ApprovalView, error) {
	if err := ledger.ValidateApprovalID(id); err != nil {
		return ApprovalView{}, fmt.Errorf("%s approval: %w: %w", verb, ErrInvalidInput, err)
	}
	var out ApprovalView
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/approvals/" + id + "/" + verb, body: d}, true, &out); err != nil {
		return ApprovalView{}, fmt.Errorf("%s approval %s: %w", verb, id, err)
	}
	return out, nil
}
