package api

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
	"github.com/agentledger/reconciler/ledger"
)

// keyParam returns the :key path parameter, unescaped. echo matches on the
// raw path when the URL has one (a business key holding "/" arrives as
// %2F), and on the decoded path otherwise; only the first needs unescaping.
func keyParam(c echo.Context) (string, error) {
	k := c.Param("key")
	if c.Request().URL.RawPath != "" {
		u, err := url.PathUnescape(k)
		if err != nil {
			return "", ledger.ErrInvalidKey
		}
		k = u
	}
	if err := ledger.ValidateKey(k); err != nil {
		return "", err
	}
	return k, nil
}

// rowResponse answers the routes that return one row.
type rowResponse struct {
	Row ledger.Row `json:"row"`
}

// outcomeBody is the body of POST /v1/claims/{key}/outcome.
type outcomeBody struct {
	Kind       ledger.OutcomeKind `json:"kind"`
	HTTPStatus int                `json:"http_status,omitempty"`
	ReceiptID  string             `json:"receipt_id,omitempty"`
	Headers    map[string]string  `json:"headers,omitempty"`
	// Attempt is the claim answer's row.attempt this outcome is for.
	Attempt int `json:"attempt,omitempty"`
	// Result is the answer to replay (row.result): opaque JSON text, never
	// logged.
	Result string `json:"result,omitempty"`
}

// outcome is POST /v1/claims/{key}/outcome: the runtime reports one attempt.
func (s *Server) outcome(c echo.Context) error {
	tenant := principalOf(c).tenant
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	var b outcomeBody
	if err := s.bind(c, &b); err != nil {
		return err
	}
	ctx := requestContext(c)
	row, ch, err := s.store.Report(ctx, tenant, key, ledger.Outcome{
		Kind: b.Kind, HTTPStatus: b.HTTPStatus, ReceiptID: b.ReceiptID, Headers: b.Headers, Attempt: b.Attempt, Result: b.Result,
		At: s.now(),
	})
	if err != nil {
		return err
	}
	s.watch.signal(tenant, key)
	s.metrics.change(ch, ledger.SourceRuntime)
	traceRow(ctx, row, keyOutcomeKind.String(string(b.Kind)))
	s.log.InfoContext(ctx, "outcome reported", append(logAttrs(tenant, key, row.RunID),
		"kind", b.Kind, "http_status", b.HTTPStatus, "status", row.Status)...)
	return writeJSON(c, http.StatusOK, rowResponse{Row: present(row)})
}

// get is GET /v1/claims/{key}.
func (s *Server) get(c echo.Context) error {
	tenant, err := tenantFor(c)
	if err != nil {
		return err
	}
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	row, err := s.store.Get(requestContext(c), tenant, key)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, rowResponse{Row: present(row)})
}

// listResponse is a page of rows, newest first.
type listResponse struct {
	Rows []ledger.Row `json:"rows"`
	// NextCursor fetches the next page; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

var listParams = map[string]bool{"status": true, "run_id": true, "limit": true, "cursor": true, "tenant": true}

// list is GET /v1/claims?status=&run_id=&limit=&cursor=.
func (s *Server) list(c echo.Context) error {
	tenant, err := tenantFor(c)
	if err != nil {
		return err
	}
	if err := checkQuery(c, listParams); err != nil {
		return err
	}
	q := c.QueryParams()
	lq := ledger.ListQuery{
		Tenant: tenant, Status: ledger.Status(q.Get("status")), RunID: q.Get("run_id"), Cursor: q.Get("cursor"),
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "limit must be an integer")
		}
		if n < 1 || n > ledger.MaxListLimit {
			return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "limit must be 1 to "+strconv.Itoa(ledger.MaxListLimit))
		}
		lq.Limit = n
	}
	if err := lq.Validate(); err != nil {
		return err
	}
	page, err := s.store.List(requestContext(c), lq)
	if err != nil {
		return err
	}
	rows := page.Rows
	if rows == nil {
		rows = []ledger.Row{}
	}
	for i := range rows {
		rows[i] = present(rows[i])
	}
	return writeJSON(c, http.StatusOK, listResponse{Rows: rows, NextCursor: page.NextCursor})
}

// checkQuery refuses a query parameter the route does not take, or one
// given twice: ignored, a typo in a filter would list everything (and a
// ?tenant= on a route that reads none would seem to be obeyed).
func checkQuery(c echo.Context, allowed map[string]bool) error {
	for name, vals := range c.QueryParams() {
		if !allowed[name] {
			return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "unknown query parameter "+quoteField(name))
		}
		if len(vals) > 1 {
			return newError(http.StatusBadRequest, apierror.CodeInvalidInput, "repeated query parameter "+quoteField(name))
		}
	}
	return nil
}
