package api

import (
	"bytes"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// start is POST /v1/claims/{key}/start[?wait=]: the outbox worker's claim of
// a key its work item named (docs/architecture.md §11). It is built from the row
// itself, so the worker sends no intent: the first start of a queued row
// proceeds (200, attempt 1, the lease), exactly once across workers; a
// start while an attempt is in flight is wait (409), and long-polls with
// ?wait= as a claim does; afterwards the §4 table applies (retry_same_key,
// replay, stop). It never inserts: no row is 404, and a row that was not
// queued is 409 not_queued. The agent's own claims of the key answer queued
// (202) whatever the worker does.
func (s *Server) start(c echo.Context) error {
	tenant := principalOf(c).tenant
	wait, err := parseWait(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	key, err := keyParam(c)
	if err != nil {
		return err
	}
	data, err := readBody(c, s.bodyLimit)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) > 0 {
		// Nothing to say but an empty object: what to call is the row's.
		if err := decodeStrict(data, &struct{}{}); err != nil {
			return err
		}
	}
	ctx := requestContext(c)
	row, err := s.store.Get(ctx, tenant, key)
	if err != nil {
		return err
	}
	cl := ledger.WorkerClaim(row, s.frozen(tenant, row.Tool, row.ToolClass), s.now())
	res, err := s.store.Claim(ctx, cl)
	if err != nil {
		return err
	}
	if res.Decision == ledger.DecisionWait && wait > 0 {
		if res, err = s.awaitRow(ctx, cl, res, wait); err != nil {
			return err
		}
	}
	s.recordClaim(ctx, cl.Row, res)
	return writeClaimJSON(c, decisionStatus(res), newClaimResponse(res))
}
