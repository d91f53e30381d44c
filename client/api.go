package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// ClaimRequest is the body of POST /v1/claims. The tenant comes from the
// token, never from here.
type ClaimRequest struct {
	RunID      string           `json:"run_id"`
	Tool       string           `json:"tool"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
	Vendor     string           `json:"vendor"`
	ToolClass  ledger.ToolClass `json:"tool_class"`
	// Intent holds only the fields that define the side effect (amount,
	// currency, customer; to, template_id…) — never a timestamp or an id the
	// model invented, or every retry would be a new intent. Any value that
	// encodes to a JSON object: a map, a struct, a json.RawMessage.
	Intent any `json:"intent"`
	// Key is an optional business key (cart id, upstream event id); empty
	// lets the ledger mint one from the run, the tool and the intent.
	Key string `json:"key,omitempty"`
	// Request is the vendor call's envelope, kept so the resolver can replay
	// it with the same key.
	Request *ledger.Request `json:"request,omitempty"`
	// Expect is the amount the call means to move; a webhook that disagrees
	// raises an alert instead of a silent success.
	Expect *ledger.Expect `json:"expect,omitempty"`
}

// ClaimResponse is the answer to a claim or a compensation.
type ClaimResponse struct {
	Decision ledger.Decision `json:"decision"`
	// Code says why a stop stops (ledger.CodeFailedPoison, ledger.CodeToolFrozen).
	Code string `json:"code,omitempty"`
	// Row is nil only for a frozen tool with no row.
	Row               *ledger.Row `json:"row"`
	ReplayWindowUntil *time.Time  `json:"replay_window_until,omitempty"`
	// HTTPStatus is the API's status: 201 proceed, 409 wait, 423 frozen, 200 the rest.
	HTTPStatus int `json:"-"`
}

// Key returns the row's key ("" for a frozen tool with no row).
func (r ClaimResponse) Key() string {
	if r.Row == nil {
		return ""
	}
	return r.Row.Key
}

// OutcomeReport is the body of POST /v1/claims/{key}/outcome: what one
// vendor call did.
type OutcomeReport struct {
	Kind       ledger.OutcomeKind `json:"kind"`
	HTTPStatus int                `json:"http_status,omitempty"`
	ReceiptID  string             `json:"receipt_id,omitempty"`
	Headers    map[string]string  `json:"headers,omitempty"`
	// Attempt is the claim answer's row.Attempt (Do sets it): a report that
	// arrives after a later attempt began leaves that attempt's lease alone.
	Attempt int `json:"attempt,omitempty"`
	// Result is the answer to hand back to a repeated call of the same
	// intent (the MCP gate sends a tool's result): JSON text of at most
	// ledger.MaxResultLen bytes, kept as Row.Result when the report settles
	// the row. Only with a response.
	Result string `json:"result,omitempty"`
}

// ResolveRequest is the body of POST /v1/claims/{key}/resolve (admin token).
type ResolveRequest struct {
	// Tenant names the row's tenant: an admin token has none.
	Tenant    string        `json:"tenant"`
	Status    ledger.Status `json:"status"`
	ReceiptID string        `json:"receipt_id,omitempty"`
	// Note says why; required.
	Note  string `json:"note"`
	Actor string `json:"actor,omitempty"`
}

// ListQuery filters GET /v1/claims.
type ListQuery struct {
	Status ledger.Status
	RunID  string
	Limit  int
	Cursor string
}

// Page is a page of rows, newest first.
type Page struct {
	Rows       []ledger.Row `json:"rows"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// RawPage is a Page whose rows are the JSON objects the server sent, with
// every field, including ones this build of the client does not know.
type RawPage struct {
	Rows       []json.RawMessage `json:"rows"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// rowAnswer is an answer {"row": …}: T is ledger.Row, or json.RawMessage
// for the row as sent.
type rowAnswer[T any] struct {
	Row T `json:"row"`
}

// Claim asks for a key before a vendor call. Every decision is an answer,
// not an error: proceed (201), replay, retry_same_key, stop (200), wait
// (409) and stop/tool_frozen (423). A transport failure or a 5xx is retried
// with the same Idempotency-Key: if the first send's answer was lost after
// it took the row's lease, the resend gets that proceed again (same
// attempt, same pending_until) — never a second lease, and no wait on its
// own row.
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (ClaimResponse, error) {
	return c.claim(ctx, req, 0)
}

// ClaimWait is Claim with ?wait=: an in-flight row is waited on for up to
// wait (at most 30 s) before the answer is wait.
func (c *Client) ClaimWait(ctx context.Context, req ClaimRequest, wait time.Duration) (ClaimResponse, error) {
	return c.claim(ctx, req, wait)
}

func (c *Client) claim(ctx context.Context, req ClaimRequest, wait time.Duration) (ClaimResponse, error) {
	if req.Intent == nil {
		return ClaimResponse{}, fmt.Errorf("claim: %w: intent is required", ErrInvalidInput)
	}
	r := request{method: http.MethodPost, path: "/v1/claims", body: req,
		accept: []int{http.StatusConflict, http.StatusLocked}}
	if wait > 0 {
		r.query = url.Values{"wait": {wait.String()}}
		r.extra = wait
	}
	var out ClaimResponse
	status, err := c.do(ctx, r, true, &out)
	if err != nil {
		return ClaimResponse{}, fmt.Errorf("claim: %w", err)
	}
	out.HTTPStatus = status
	if out.Decision == "" {
		return ClaimResponse{}, errors.New("claim: answer without a decision")
	}
	return out, nil
}

// ReportOutcome reports one vendor call. It is resent with the same body
// and Idempotency-Key on a transport failure or a 5xx: the ledger applies
// the report once, and the resend gets the row.
// When it finally fails the row stays pending for the resolver.
func (c *Client) ReportOutcome(ctx context.Context, key string, o OutcomeReport) (ledger.Row, error) {
	var out rowAnswer[ledger.Row]
	if _, err := c.do(ctx, request{method: http.MethodPost, path: keyPath(key, "/outcome"), body: o}, true, &out); err != nil {
		return ledger.Row{}, fmt.Errorf("report outcome of %s: %w", key, err)
	}
	return out.Row, nil
}

// Get returns the row of key.
func (c *Client) Get(ctx context.Context, key string) (ledger.Row, error) {
	return get[ledger.Row](ctx, c, key)
}

// GetJSON is Get returning the row's JSON object as the server sent it
// (an admin tool's --json passes on every field).
func (c *Client) GetJSON(ctx context.Context, key string) (json.RawMessage, error) {
	return get[json.RawMessage](ctx, c, key)
}

func get[T any](ctx context.Context, c *Client, key string) (T, error) {
	var q url.Values
	if c.tenant != "" {
		q = url.Values{"tenant": {c.tenant}}
	}
	var out rowAnswer[T]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: keyPath(key, ""), query: q}, true, &out); err != nil {
		var zero T
		return zero, fmt.Errorf("get %s: %w", key, err)
	}
	return out.Row, nil
}

// List returns a page of rows, newest first.
func (c *Client) List(ctx context.Context, lq ListQuery) (Page, error) {
	return list[Page](ctx, c, lq)
}

// ListJSON is List returning each row as the server sent it.
func (c *Client) ListJSON(ctx context.Context, lq ListQuery) (RawPage, error) {
	return list[RawPage](ctx, c, lq)
}

func list[P Page | RawPage](ctx context.Context, c *Client, lq ListQuery) (P, error) {
	q := url.Values{}
	if c.tenant != "" {
		q.Set("tenant", c.tenant)
	}
	if lq.Status != "" {
		q.Set("status", string(lq.Status))
	}
	if lq.RunID != "" {
		q.Set("run_id", lq.RunID)
	}
	if lq.Limit > 0 {
		q.Set("limit", strconv.Itoa(lq.Limit))
	}
	if lq.Cursor != "" {
		q.Set("cursor", lq.Cursor)
	}
	var out P
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/claims", query: q}, true, &out); err != nil {
		var zero P
		return zero, fmt.Errorf("list: %w", err)
	}
	return out, nil
}

// Compensate claims the derived key that undoes key's side effect (refund,
// void). It answers like a claim; a second request finds the first
// compensation row. ErrCompensationPending while the original is open,
// ErrCompensationFailed when it failed.
func (c *Client) Compensate(ctx context.Context, key, action string) (ClaimResponse, error) {
	body := struct {
		Action string `json:"action"`
	}{action}
	var out ClaimResponse
	status, err := c.do(ctx, request{method: http.MethodPost, path: keyPath(key, "/compensations"), body: body,
		accept: []int{http.StatusConflict, http.StatusLocked}}, true, &out)
	if err != nil {
		return ClaimResponse{}, fmt.Errorf("compensate %s: %w", key, err)
	}
	out.HTTPStatus = status
	return out, nil
}

// Resolve closes a row by hand (admin token): succeeded or failed_poison,
// with a note saying why.
func (c *Client) Resolve(ctx context.Context, key string, r ResolveRequest) (ledger.Row, error) {
	return resolve[ledger.Row](ctx, c, key, r)
}

// ResolveJSON is Resolve returning the resolved row as the server sent it.
func (c *Client) ResolveJSON(ctx context.Context, key string, r ResolveRequest) (json.RawMessage, error) {
	return resolve[json.RawMessage](ctx, c, key, r)
}

func resolve[T any](ctx context.Context, c *Client, key string, r ResolveRequest) (T, error) {
	var out rowAnswer[T]
	if _, err := c.do(ctx, request{method: http.MethodPost, path: keyPath(key, "/resolve"), body: r}, true, &out); err != nil {
		var zero T
		return zero, fmt.Errorf("resolve %s: %w", key, err)
	}
	return out.Row, nil
}

// Start is the outbox worker's claim of a queued key (POST
// /v1/claims/{key}/start, docs/architecture.md §11): the row's own identity,
// no body. The first start of a queued row answers proceed (attempt 1, the
// lease), once across workers; a start while an attempt is in flight
// answers wait; afterwards the §4 table applies (retry_same_key, replay,
// stop). ErrNotFound when there is no row, ErrNotQueued when the row was
// not queued for a worker. A lost answer is resent: the resent start finds
// the lease the first one took and answers wait, never a second proceed.
func (c *Client) Start(ctx context.Context, key string) (ClaimResponse, error) {
	return c.start(ctx, key, 0)
}

// StartWait is Start with ?wait=: an attempt in flight is waited on for up
// to wait (at most 30 s) before the answer is wait.
func (c *Client) StartWait(ctx context.Context, key string, wait time.Duration) (ClaimResponse, error) {
	return c.start(ctx, key, wait)
}

func (c *Client) start(ctx context.Context, key string, wait time.Duration) (ClaimResponse, error) {
	if err := ledger.ValidateKey(key); err != nil {
		return ClaimResponse{}, fmt.Errorf("start: %w: %w", ErrInvalidInput, err)
	}
	r := request{method: http.MethodPost, path: keyPath(key, "/start"), accept: []int{http.StatusConflict, http.StatusLocked}}
	if wait > 0 {
		r.query = url.Values{"wait": {wait.String()}}
		r.extra = wait
	}
	var out ClaimResponse
	status, err := c.do(ctx, r, true, &out)
	if err != nil {
		return ClaimResponse{}, fmt.Errorf("start %s: %w", key, err)
	}
	out.HTTPStatus = status
	if out.Decision == "" {
		return ClaimResponse{}, fmt.Errorf("start %s: answer without a decision", key)
	}
	return out, nil
}
